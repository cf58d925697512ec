"""Peer implementations of a spec, as verify() candidates: what a user would
use instead of cubridge (BENCHMARK.md). Each factory takes a Spec and returns
an impl(q, k, v, scale=None, **aux); `cubridge bench` may reuse them.

- eager_impl: the spec's own reference, computed in fp32 (out cast back).
- sdpa_impl: torch SDPA with a dense boolean mask, plus a dense additive bias
  when score_mod only adds a score-independent bias (ALiBi, tables). Returns
  out only (SDPA gives no LSE).
- flex_impl: FlexAttention with a BlockMask and the spec's mods; eager by
  default (works on CPU), compile=True for the fused Triton kernel.

The impls pickle as (kind, spec file), so they can run in isolated workers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from cubridge.attention import Shape
from cubridge.spec import Spec, bind_mods, load, make_aux
from cubridge.spec.mods import BoundMods, apply_score_mod, dense_mask
from cubridge.verify.candidate import impl_factory


class UnsupportedSpec(ValueError):
    """The peer cannot express this spec (e.g. SDPA and a softcap)."""


def additive_bias_only(spec: Spec, shape: Shape | None = None) -> bool:
    """True if score_mod(s) - s does not depend on s: checked numerically on a
    small shape, with two different score tensors."""
    if spec.score_mod is None:
        return True
    shape = shape or Shape(2, 4, 2, 33, 47, 16)
    g = torch.Generator().manual_seed(0)
    mods = bind_mods(spec, make_aux(spec, shape, g))
    grid = (shape.b, shape.hq, shape.sq, shape.sk)
    s1 = torch.randn(grid, generator=g, dtype=torch.float64)
    s2 = 5 * torch.randn(grid, generator=g, dtype=torch.float64)
    d1, d2 = apply_score_mod(mods, s1) - s1, apply_score_mod(mods, s2) - s2
    return bool(torch.allclose(d1, d2, rtol=1e-9, atol=1e-9))


class PeerImpl:
    """A peer bound to a spec. Pickles as (kind, spec path, options)."""

    def __init__(self, kind: str, spec: Spec, **options: object) -> None:
        if kind != "eager" and not spec.mods_describe_reference:
            raise UnsupportedSpec(f"{spec.name}: its reference does more than its mods say "
                                  f"(it has none), so {kind} cannot compute it")
        self.kind, self.spec, self.options = kind, spec, options
        self.name = f"{kind}[{spec.name}]"
        self._call: Callable[..., object] = _BUILDERS[kind](spec, **options)

    def __call__(self, q, k, v, scale=None, **aux):
        return self._call(q, k, v, scale=scale, **aux)

    def __reduce__(self):
        if self.spec.path is None:
            raise TypeError(f"{self.name}: a spec built in memory cannot be sent to a worker")
        return (_rebuild, (self.kind, str(self.spec.path), self.options))


def _rebuild(kind: str, path: str, options: dict) -> PeerImpl:
    return PeerImpl(kind, load(path), **options)


def _build_eager(spec: Spec, compute_dtype: torch.dtype = torch.float32
                 ) -> Callable[..., object]:
    # The reference run in bf16 end to end (scores, softmax) misses bf16
    # tolerances by design; fp32 is how a user would run it for accuracy.
    def eager(q, k, v, scale=None, **aux):
        up = lambda t: t.to(compute_dtype) if t.is_floating_point() else t
        result = spec.reference(up(q), up(k), up(v), **{n: up(t) for n, t in aux.items()})
        if isinstance(result, tuple):
            return result[0].to(q.dtype), result[1].float()
        return result.to(q.dtype)
    return eager


def _build_sdpa(spec: Spec) -> Callable[..., object]:
    if spec.normalizer != "softmax":
        raise UnsupportedSpec(f"SDPA computes softmax attention; {spec.name} uses "
                              f"{spec.normalizer}")
    if not additive_bias_only(spec):
        raise UnsupportedSpec(f"SDPA takes an additive bias; {spec.name}'s score_mod is not one")

    def sdpa(q, k, v, scale=None, **aux):
        mods = bind_mods(spec, aux)
        b, hq, sq, sk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        allowed = dense_mask(mods, b, hq, sq, sk, q.device)
        if spec.score_mod is None:
            mask = allowed
        else:
            bias = apply_score_mod(mods, torch.zeros(b, hq, sq, sk, device=q.device))
            bias = bias.masked_fill(~allowed, float("-inf"))
            # Softmax ignores a per-row shift: moving the row max to 0 keeps the keys
            # that matter precise. The bias stays fp32: CUDA SDPA wants it in q's
            # dtype, and a bf16 ALiBi bias on long rows misses bf16 tolerances, so
            # on CUDA this peer runs SDPA in fp32 and rounds the output back.
            row_max = bias.amax(-1, keepdim=True)
            mask = bias - torch.where(torch.isinf(row_max), 0.0, row_max)
        dtype = q.dtype
        if spec.score_mod is not None and q.device.type == "cuda":
            q, k, v = q.float(), k.float(), v.float()
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
        out = out.to(dtype)
        # Rows with no allowed key: SDPA's result there is not specified; ours is 0.
        return out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    return sdpa


def _build_flex(spec: Spec, compile: bool = False) -> Callable[..., object]:
    from torch.nn.attention.flex_attention import (
        AuxRequest,
        create_block_mask,
        flex_attention,
    )
    if spec.normalizer != "softmax":
        raise UnsupportedSpec(f"FlexAttention computes softmax attention; {spec.name} uses "
                              f"{spec.normalizer}")
    attend = torch.compile(flex_attention, dynamic=False) if compile else flex_attention

    def flex(q, k, v, scale=None, **aux):
        mods: BoundMods = bind_mods(spec, aux)
        block_mask = None
        if mods.mask_mod is not None:
            block_mask = create_block_mask(mods.mask_mod, q.shape[0], q.shape[1], q.shape[2],
                                           k.shape[2], device=q.device)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*flex_attention called without")
            out, aux_out = attend(q, k, v, score_mod=mods.score_mod, block_mask=block_mask,
                                  scale=scale, enable_gqa=q.shape[1] != k.shape[1],
                                  return_aux=AuxRequest(lse=True))
        return out, aux_out.lse
    return flex


_BUILDERS: dict[str, Callable[..., Callable[..., object]]] = {
    "eager": _build_eager, "sdpa": _build_sdpa, "flex": _build_flex,
}


@impl_factory
def eager_impl(spec: Spec, compute_dtype: torch.dtype = torch.float32) -> PeerImpl:
    return PeerImpl("eager", spec, compute_dtype=compute_dtype)


@impl_factory
def sdpa_impl(spec: Spec) -> PeerImpl:
    """Raises UnsupportedSpec if SDPA cannot express the spec."""
    return PeerImpl("sdpa", spec)


@impl_factory
def flex_impl(spec: Spec, compile: bool = False) -> PeerImpl:
    """Raises UnsupportedSpec if FlexAttention cannot express the spec."""
    return PeerImpl("flex", spec, compile=compile)
