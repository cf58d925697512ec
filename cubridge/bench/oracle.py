"""The float64 reference output every implementation is checked against.

At benchmark sizes a float64 reference over all heads at once does not fit
(S = 8192, 32 heads: 17 GB per score matrix), so when the spec has mods the
reference is computed from them one (batch element, head chunk) at a time,
with the true head indices passed to the mods. That path is used only after it
has been shown to agree with the spec's own `reference` on a smaller problem of
the same heads; otherwise the spec's reference runs whole, in float64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.attention import Shape, default_scale
from cubridge.bench.case import make_aux_on
from cubridge.spec.grids import arange, eval_mask, eval_score
from cubridge.spec.model import Spec
from cubridge.spec.mods import BoundMods, bind_mods
from cubridge.verify.peers import first_tensor

# Elements of one float64 score chunk: 2^28 * 8 bytes = 2 GiB.
SCORE_CHUNK_ELEMENTS = 1 << 28
# Largest sequence length of the mods-vs-reference agreement check.
CHECK_MAX_SEQ = 2048
CHECK_REL_TOL = 1e-6


@dataclass(frozen=True)
class Reference:
    out: torch.Tensor  # float64 [B, Hq, Sq, Dv]
    method: str  # how it was computed, for the report


def attention_from_mods(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mods: BoundMods,
                        normalizer: str, scale: float | None,
                        chunk_elements: int = SCORE_CHUNK_ELEMENTS) -> torch.Tensor:
    """Attention defined by mods and normaliser, in float64, a head chunk at a time."""
    bsz, hq, sq, _ = q.shape
    hk, sk = k.shape[1], k.shape[2]
    group = hq // hk
    scale = default_scale(q.shape[-1]) if scale is None else scale
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    out = torch.empty(bsz, hq, sq, v.shape[-1], dtype=torch.float64, device=q.device)
    heads = max(1, min(hq, chunk_elements // (sq * sk)))
    dev = q.device
    qi, ki = arange(sq, dev).view(1, 1, -1, 1), arange(sk, dev).view(1, 1, 1, -1)
    for b in range(bsz):
        bi = arange(1, dev, b).view(-1, 1, 1, 1)
        for h0 in range(0, hq, heads):
            h1 = min(hq, h0 + heads)
            hi = arange(h1 - h0, dev, h0).view(1, -1, 1, 1)
            kv = torch.arange(h0, h1, device=dev) // group
            s = torch.matmul(q64[b, h0:h1], k64[b, kv].transpose(-1, -2)).unsqueeze(0) * scale
            if mods.score_mod is not None:
                s = eval_score(mods.score_mod, s, bi, hi, qi, ki).to(torch.float64)
            allowed = (eval_mask(mods.mask_mod, bi, hi, qi, ki) if mods.mask_mod is not None
                       else torch.ones(1, 1, sq, sk, dtype=torch.bool, device=dev))
            if normalizer == "softmax":
                s = s.masked_fill(~allowed, float("-inf"))
                rowmax = s.amax(dim=-1, keepdim=True).nan_to_num(neginf=0.0)
                p = torch.exp(s - rowmax)
                denom = p.sum(dim=-1, keepdim=True)
                p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
            elif normalizer == "sigmoid":
                p = torch.sigmoid(s).masked_fill(~allowed, 0.0)
            elif normalizer == "relu":
                p = torch.relu(s).masked_fill(~allowed, 0.0)
            else:
                raise ValueError(f"unknown normalizer {normalizer!r}")
            out[b, h0:h1] = torch.matmul(p[0], v64[b, kv])
    return out


def _reference_whole(spec: Spec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     aux: Mapping[str, torch.Tensor]) -> torch.Tensor:
    aux64 = {n: t.to(torch.float64) if t.is_floating_point() else t for n, t in aux.items()}
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    return first_tensor(spec.reference(q64, k64, v64, **aux64)).to(torch.float64)


def mods_agree_with_reference(spec: Spec, shape: Shape, device: torch.device | str,
                              seed: int = 0) -> tuple[bool, str]:
    """Run both definitions on one batch element of `shape` with S <= CHECK_MAX_SEQ
    (all heads kept, so head-indexed aux is exercised) and compare in float64."""
    s = min(shape.sq, CHECK_MAX_SEQ)
    small = Shape(1, shape.hq, shape.hk, s, min(shape.sk, CHECK_MAX_SEQ), shape.d, shape.dv)
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(1, small.hq, small.sq, small.d, generator=gen, device=device,
                    dtype=torch.float64)
    k = torch.randn(1, small.hk, small.sk, small.d, generator=gen, device=device,
                    dtype=torch.float64)
    v = torch.randn(1, small.hk, small.sk, small.head_dim_v, generator=gen, device=device,
                    dtype=torch.float64)
    aux = make_aux_on(spec, small, seed, torch.device(device))
    want = _reference_whole(spec, q, k, v, aux)
    got = attention_from_mods(q, k, v, bind_mods(spec, aux), spec.normalizer, spec.scale)
    rel = float((got - want).norm() / want.norm().clamp_min(1e-300))
    if not rel <= CHECK_REL_TOL:
        return False, f"mods disagree with reference at {small}: rel err {rel:.2e}"
    return True, f"mods agree with reference at {small} (rel err {rel:.1e})"


def float64_reference(spec: Spec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      aux: Mapping[str, torch.Tensor], mods: BoundMods,
                      mods_checked: bool) -> Reference:
    """The float64 output for these inputs: from the mods in head chunks when they
    were shown to agree with the reference, else the spec's reference run whole."""
    if mods_checked:
        out = attention_from_mods(q, k, v, mods, spec.normalizer, spec.scale)
        return Reference(out, "mods, float64, per head chunk")
    return Reference(_reference_whole(spec, q, k, v, aux), "spec reference, float64")
