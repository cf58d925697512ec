"""Mods as a user of FlexAttention's FLASH backend has to write them.

Flex FLASH compiles a spec's mods into CuTe-DSL code, and that code generator
(torch 2.11) lacks ops that Inductor emits for ordinary PyTorch: `clamp`,
`torch.maximum` and `torch.minimum` stop it ("UNSUPPORTED CUTEDSL OPERATION:
'maximum'"), a reduction over a short captured row (`.any(dim=-1)`) does not
compile, and int64 index tensors fail a store ("store Int64 to Tensor with
element type Int32"). attention-gym's NATTEN, STA, tree and Graphormer mods
all clamp. A user meets the error at the first call and rewrites the mod:
clamp as `torch.where`, the reduction as ORs, the index tensors as int32.

`flash_form` makes that rewrite mechanically, so that the benchmark runs the
peer as its user would: the mod is traced once to ATen ops (make_fx, under
Flex's own rule that a tensor subscript is an index op) with those ops
decomposed, and captured int64 tensors whose values fit are narrowed to int32.
What it computes is unchanged; the benchmark verifies the peer's output
against the float64 reference either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

aten = torch.ops.aten

WHAT = "clamp/maximum/minimum as torch.where, .any over a row as ORs, int32 indices"


def _clamp(x: torch.Tensor, lo: object = None, hi: object = None) -> torch.Tensor:
    if lo is not None:
        x = torch.where(x < lo, lo, x)
    if hi is not None:
        x = torch.where(x > hi, hi, x)
    return x


def _maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a > b, a, b)


def _minimum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a < b, a, b)


def _any_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    out = x.select(dim, 0)
    for i in range(1, x.shape[dim]):
        out = out | x.select(dim, i)
    return out.unsqueeze(dim) if keepdim else out


DECOMPOSITIONS = {
    aten.clamp.default: _clamp,
    aten.clamp.Tensor: _clamp,
    aten.clamp_min.default: lambda x, lo: _clamp(x, lo, None),
    aten.clamp_max.default: lambda x, hi: _clamp(x, None, hi),
    aten.maximum.default: _maximum,
    aten.minimum.default: _minimum,
    aten.any.dim: _any_dim,
}


def _narrow_int64(gm: torch.fx.GraphModule) -> None:
    for name, value in list(gm.named_buffers()):  # (make_fx keeps captured tensors there)
        if value.dtype == torch.int64 and value.numel() and value.abs().max().item() < 2**31:
            setattr(gm, name, value.to(torch.int32))


def flash_form(fn: Callable[..., torch.Tensor] | None, is_score: bool,
               device: torch.device) -> Callable[..., torch.Tensor] | None:
    """`fn` (a score_mod if `is_score`, else a mask_mod) rewritten as above;
    None stays None."""
    if fn is None:
        return None
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.fx.experimental.proxy_tensor import make_fx

    index = [torch.zeros((), dtype=torch.int32, device=device) for _ in range(4)]
    args = [torch.zeros((), device=device), *index] if is_score else index
    with TransformGetItemToIndex():
        gm = make_fx(fn, decomposition_table=DECOMPOSITIONS)(*args)
    _narrow_int64(gm)
    # (Flex reads a mod's arity from its signature: a GraphModule's is *args)
    if is_score:
        def score_form(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
            return gm(score, b, h, q_idx, kv_idx)
        return score_form

    def mask_form(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        return gm(b, h, q_idx, kv_idx)
    return mask_form
