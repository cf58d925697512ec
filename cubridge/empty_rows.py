"""Rows a floor mask leaves without a key, as the spec computes them.

A spec that masks with a finite score C far below any other (Hugging Face's
`torch.finfo(dtype).min`; transfer.score_masks, "Floor masks") weighs every key of
a row it masks whole alike: out = the mean of V over all Sk keys, lse = C +
log(Sk). The kernels run such a mask as a mask, and give a row with no allowed key
out = 0 and lse = -inf (docs/hooks.md, "Index conventions"); this pass, run after
the kernel, writes the spec's answer into those rows. It is part of every call of
such a variant: the CuIR executor runs it for a target whose `empty_row_score` is
set, the compiled variant and cubridge.flex_attention after the kernel (where the
mask's row intervals do not prove every row keeps a key: HookHeader.fill_empty_rows).
Plain tensor code: it runs on the outputs' device and under torch.compile.
"""

from __future__ import annotations

import math

import torch


def fill_empty_rows(out: torch.Tensor, lse: torch.Tensor, v: torch.Tensor, score: float
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) with the rows that kept no key (lse -inf) weighing every key
    alike at the masked score `score`: out [B, Hq, Sq, Dv] = the mean of v
    [B, Hk, Sk, Dv] over its keys (per batch and the query head's KV head), lse
    [B, Hq, Sq] = score + log(Sk) in float32. Other rows are returned as they are."""
    hq, hk, sk = out.shape[1], v.shape[1], v.shape[2]
    empty = torch.isneginf(lse)
    # (summed in float32 without a float copy of v)
    mean = torch.mean(v, dim=2, dtype=torch.float32).to(out.dtype)  # [B, Hk, Dv]
    mean = mean.repeat_interleave(hq // hk, dim=1)[:, :, None, :]  # [B, Hq, 1, Dv]
    out = torch.where(empty[..., None], mean, out)
    return out, lse.masked_fill(empty, score + math.log(sk))
