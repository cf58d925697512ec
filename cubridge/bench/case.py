"""One benchmark problem: a spec at one head config and sequence length, with the
inputs every implementation receives."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cubridge.attention import HeadConfig, Shape, default_scale
from cubridge.bench.flops import MaskStats
from cubridge.spec.inputs import make_aux
from cubridge.spec.model import Spec
from cubridge.verify.peers import PeerProblem


@dataclass(kw_only=True)
class Case(PeerProblem):
    """A PeerProblem (what every implementation receives) with the head config it
    was made for, the mask's statistics (pairs, structure), the FLOPs TFLOP/s
    divide, and how they were counted (cubridge.bench.work)."""

    config: HeadConfig
    stats: MaskStats
    flops: float
    counting: str

    def __post_init__(self) -> None:
        st = self.stats
        self.structure, self.band = st.structure, st.band
        self.depends_on_batch, self.depends_on_head = st.depends_on_batch, st.depends_on_head


def case_scale(spec: Spec, shape: Shape) -> float:
    return default_scale(shape.d) if spec.scale is None else spec.scale


def make_aux_on(spec: Spec, shape: Shape, seed: int, device: torch.device) -> dict:
    """The spec's aux tensors for `shape` on `device`. Specs draw them on the CPU
    from a CPU generator (the spec part's convention, with its checks); they are
    then moved, so every device sees the same documents, slopes and tables."""
    aux = make_aux(spec, shape, torch.Generator().manual_seed(seed))
    return {name: t.to(device) for name, t in aux.items()}
