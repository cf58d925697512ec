"""Float64 attention reference for CuIR tests (layouts of cubridge.attention)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def attention_f64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                  scale: float | None = None,
                  mask: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                  score_mod: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                                      torch.Tensor] | None = None,
                  activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(out, lse) in float64; rows with no allowed key give out 0, lse -inf.
    mask(q_idx, kv_idx) / score_mod(s, h, q_idx, kv_idx) take broadcast index
    tensors; `activation` switches to the elementwise normaliser (lse None)."""
    hq, hk = q.shape[1], k.shape[1]
    kk = k.double().repeat_interleave(hq // hk, dim=1)
    vv = v.double().repeat_interleave(hq // hk, dim=1)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = q.double() @ kk.transpose(-1, -2) * scale
    qi = torch.arange(q.shape[2])[:, None]
    ki = torch.arange(k.shape[2])[None, :]
    if score_mod is not None:
        h = torch.arange(hq)[None, :, None, None]
        s = score_mod(s, h, qi, ki)
    allowed = torch.ones_like(s, dtype=torch.bool)
    if causal:
        allowed &= qi >= ki
    if mask is not None:
        allowed &= mask(qi, ki)
    if activation is not None:
        p = torch.where(allowed, activation(s), 0.0)
        return p @ vv, None
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(lse.isinf(), 0.0, lse)[..., None])
    return p @ vv, lse


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm().clamp_min(1e-30))
