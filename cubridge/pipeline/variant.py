"""A compiled variant: one spec's hooks plugged into a library kernel, callable
like any attention function and usable inside a model.

    kernel = cubridge.compile("examples/specs/alibi_causal.py")
    out, lse = kernel(q, k, v, **aux)          # aux as the spec's make_aux gives them

It runs as the library kernel's torch custom op (`cubridge::attention_fwd`),
so it composes with torch.compile; the aux tensors the hooks read (and block
tables for data-dependent masks) are packed per call from the spec's aux.
"""

from __future__ import annotations

import math

import torch

from cubridge.attention import Shape
from cubridge.lower.hook_header import HookHeader
from cubridge.spec.model import Spec


class VariantKernel:
    """attention(q, k, v, scale=None, **aux) -> (out, lse), lse None for
    elementwise normalisers; q/k/v in cubridge.attention's layouts.

    The kernels for the spec's head dims and dtypes are compiled and
    registered with the torch op ahead of the first call (`prepare`), so the
    call itself is plain tensor code that torch.compile traces in full."""

    def __init__(self, spec: Spec, header: HookHeader, kernel: str = "fa_sm80") -> None:
        if kernel != "fa_sm80":
            raise ValueError(f"kernel {kernel!r} has no launcher yet (have: fa_sm80)")
        self.spec = spec
        self.header = header
        self.kernel = kernel
        self._keys: dict[tuple[int, torch.dtype], str] = {}

    @property
    def hooks_header(self) -> str:
        return self.header.text

    def prepare(self, device: torch.device | str = "cuda") -> VariantKernel:
        """Compile (cached) and register the kernel for every head dim and dtype
        of the spec on `device`'s architecture."""
        from cubridge.build.attention_op import register
        from cubridge.build.driver import device_arch, require_cuda_device
        from cubridge.kernels import fa_sm80

        arch = device_arch(require_cuda_device(torch.device(device)))
        for d in sorted({cfg.d for cfg in self.spec.configs}):
            for dtype in self.spec.dtypes:
                kernel = fa_sm80.kernel_for(d, dtype, arch, False, self.header.text)
                self._keys[(d, dtype)] = register(kernel)
        return self

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float | None = None, **aux: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError(f"{self.spec.name}: q, k, v must be 4-d [B, H, S, D], got "
                             f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
        if not self._keys:
            self.prepare(q.device)
        key = self._keys.get((q.shape[3], q.dtype))
        if key is None:
            raise ValueError(f"{self.spec.name}: no kernel for head dim {q.shape[3]} and "
                             f"{q.dtype}; the spec declares {sorted(self._keys)}")
        shape = Shape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
                      v.shape[3] if v.shape[3] != q.shape[3] else None)
        packed = self.header.pack_aux(aux, shape)
        if not torch.compiler.is_compiling():  # layout checks read pointers: eager only
            from cubridge.build.attention_op import check_inputs

            check_inputs(q, k, v, [q.shape[3]], self.spec.dtypes, packed, what=self.spec.name)
        scale = self.spec.scale if scale is None else scale
        scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
        out, lse = torch.ops.cubridge.attention_fwd(q, k, v, packed, scale, key)
        return out, (lse if self.spec.normalizer == "softmax" else None)

    def __repr__(self) -> str:
        return (f"VariantKernel({self.spec.name!r} on {self.kernel}, "
                f"{self.header.plan.classification} block classification, "
                f"{self.header.plan.normalizer})")
