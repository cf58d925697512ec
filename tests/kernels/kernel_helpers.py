"""Shared helpers of the kernel tests: a float64 attention reference with masks,
score mods and elementwise normalisers, and the GPU skip."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

# (q_idx [Sq,1], kv_idx [1,Sk], h [1,H,1,1]) -> tensor broadcast to [B,H,Sq,Sk]
IndexFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        scale: float | None = None, mask: IndexFn | None = None,
                        score_mod: Callable[..., torch.Tensor] | None = None,
                        activation: Callable[[torch.Tensor], torch.Tensor] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """float64 attention by the hook contract's semantics (docs/hooks.md)."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    qi = torch.arange(q.shape[2], device=q.device)[:, None]
    ki = torch.arange(k.shape[2], device=q.device)[None, :]
    hi = torch.arange(q.shape[1], device=q.device)[None, :, None, None]
    if score_mod is not None:
        s = score_mod(s, qi, ki, hi)
    allowed = torch.ones_like(s, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask(qi, ki, hi)
    if activation is not None:
        return activation(s).masked_fill(~allowed, 0.0) @ v, None
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(s - safe[..., None]) @ v, lse


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def tolerance(dtype: torch.dtype) -> float:
    """Relative Frobenius error bound for bf16/fp16 operands with fp32 accumulation."""
    return 1e-2 if dtype == torch.bfloat16 else 4e-3


def gpu_inputs(b: int, hq: int, hk: int, sq: int, sk: int, d: int, dtype: torch.dtype
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded random normal q [B,Hq,Sq,D], k and v [B,Hk,Sk,D] on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(hash((b, hq, hk, sq, sk, d)) % 2**31)
    return tuple(torch.randn(bb, h, s, d, device="cuda", dtype=dtype, generator=g)
                 for bb, h, s in ((b, hq, sq), (b, hk, sk), (b, hk, sk)))


def causal_mask(qi: torch.Tensor, ki: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    return qi >= ki
