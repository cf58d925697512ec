"""Small plain-PyTorch building blocks for spec references (docs/specs.md).

A reference may use these or write the same few lines itself; they only
spell out the shared conventions of cubridge.attention once.
"""

from __future__ import annotations

import torch

from cubridge.attention import default_scale


def expand_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """k, v repeated so that query head h reads KV head h // (Hq // Hk)."""
    group = q.shape[1] // k.shape[1]
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def scaled_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q @ k^T * scale as [B, Hq, Sq, Sk] (k already expanded to Hq heads)."""
    scale = default_scale(q.shape[-1]) if scale is None else scale
    return (q @ k.transpose(-1, -2)) * scale


def positions(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Absolute positions: q_idx as [Sq, 1] and kv_idx as [1, Sk]."""
    return (torch.arange(q.shape[2], device=q.device)[:, None],
            torch.arange(k.shape[2], device=q.device)[None, :])


def softmax_attention(scores: torch.Tensor, allowed: torch.Tensor, v: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over allowed keys: (out, lse). Rows with no allowed key give
    out = 0 and lse = -inf (a plain softmax would give NaN there). The weights
    are exp(s - the row's max) over their sum, not exp(s - lse): a row whose
    every score is finfo.min (a Hugging Face mask value) weighs its keys alike,
    where lse = finfo.min + log(Sk) rounds to finfo.min and exp(s - lse) gives
    each weight 1."""
    masked = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(masked, dim=-1)
    top = masked.amax(dim=-1, keepdim=True)
    weights = torch.exp(masked - torch.where(torch.isinf(top), torch.zeros_like(top), top))
    total = weights.sum(dim=-1, keepdim=True)
    p = weights / torch.where(total > 0, total, torch.ones_like(total))
    return p @ v, lse


def elementwise_attention(weights: torch.Tensor, allowed: torch.Tensor, v: torch.Tensor
                          ) -> torch.Tensor:
    """sum_k weights * v over allowed keys (sigmoid/relu normalisers)."""
    return weights.masked_fill(~allowed, 0.0) @ v
