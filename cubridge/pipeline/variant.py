"""A compiled variant: one spec's hooks plugged into a library kernel, callable
like any attention function and usable inside a model.

    kernel = cubridge.compile("examples/specs/alibi_causal.py")
    out, lse = kernel(q, k, v, **aux)          # aux as the spec's make_aux gives them

It runs as the library kernel's torch custom op (`cubridge::attention_fwd`),
so it composes with torch.compile; the aux tensors the hooks read (and block
tables for data-dependent masks) are packed per call from the spec's aux.
"""

from __future__ import annotations

import torch

from cubridge.attention import Shape
from cubridge.lower.hook_header import HookHeader
from cubridge.spec.model import Spec


class VariantKernel:
    """attention(q, k, v, scale=None, **aux) -> (out, lse), lse None for
    elementwise normalisers; q/k/v in cubridge.attention's layouts."""

    def __init__(self, spec: Spec, header: HookHeader, kernel: str = "fa_sm80") -> None:
        if kernel != "fa_sm80":
            raise ValueError(f"kernel {kernel!r} has no launcher yet (have: fa_sm80)")
        self.spec = spec
        self.header = header
        self.kernel = kernel

    @property
    def hooks_header(self) -> str:
        return self.header.text

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float | None = None, **aux: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        from cubridge.kernels import fa_sm80  # needs cuda-python only when called

        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError(f"{self.spec.name}: q, k, v must be 4-d [B, H, S, D], got "
                             f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
        shape = Shape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
                      v.shape[3] if v.shape[3] != q.shape[3] else None)
        packed = self.header.pack_aux(aux, shape)
        scale = self.spec.scale if scale is None else scale
        return fa_sm80.attention(q, k, v, scale=scale, hooks_header=self.header.text,
                                 aux=packed)

    def __repr__(self) -> str:
        return (f"VariantKernel({self.spec.name!r} on {self.kernel}, "
                f"{self.header.plan.classification} block classification, "
                f"{self.header.plan.normalizer})")
