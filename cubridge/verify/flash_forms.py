"""Mods as a user of FlexAttention's FLASH backend has to write them.

Flex FLASH compiles a spec's mods into CuTe-DSL code, and that code generator
(torch 2.11) stops on ordinary PyTorch that the Triton backend takes. Seen on an
H100 with attention-gym's mods (`bench/results/h100-attn-gym-corpus-54e25ef/`):
`clamp` (NATTEN, STA, the tree mask, Graphormer's edge bias) lowers to
`maximum`, which it lacks ("UNSUPPORTED CUTEDSL OPERATION: 'maximum'"); int64
index tensors fail a store (Flamingo's mask); and VSA's top-k row and Flamingo's
`interval[0]` end in "Expected TensorSSA, but got <class 'int'>", a value
stored as a Python number, which a constant subscript is where it reaches the
code (inferred from the error's site, a fragment store). A user meets the error
at the first call and rewrites the mod: clamp as `torch.where`, the row's
entries compared one by one, the captured tensor sliced beforehand
(`starts = intervals[:, 0]`), indices as int32; shifts as products and floor
divisions where the generator lacks them too (not seen: a guess at Morton's
bit interleaving).

`flash_form` makes those rewrites mechanically, so that the benchmark runs the
peer as its user would: the mod is traced once to ATen ops (make_fx, under
Flex's own rule that a tensor subscript is an index op) with those ops
decomposed, constant subscripts folded into slices of the captured tensors, and
int64 tensors whose values fit narrowed to int32. What it computes is
unchanged, and the benchmark verifies the peer's output against the float64
reference either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import fx

aten = torch.ops.aten

WHAT = ("clamp/maximum/minimum as where, a row's .any as ORs, constant subscripts "
        "pre-sliced, shifts as products, int32 indices")


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


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    return torch.div(x, 2 ** bits, rounding_mode="floor")  # (arithmetic: floors, as >> does)


def _shift_left(x: torch.Tensor, bits: int) -> torch.Tensor:
    return x * 2 ** bits


DECOMPOSITIONS = {
    aten.clamp.default: _clamp,
    aten.clamp.Tensor: _clamp,
    aten.clamp_min.default: lambda x, lo: _clamp(x, lo, None),
    aten.clamp_max.default: lambda x, hi: _clamp(x, None, hi),
    aten.maximum.default: _maximum,
    aten.minimum.default: _minimum,
    aten.any.dim: _any_dim,
    aten.__rshift__.Scalar: _shift_right,
    aten.bitwise_right_shift.Tensor_Scalar: _shift_right,
    aten.__lshift__.Scalar: _shift_left,
    aten.bitwise_left_shift.Tensor_Scalar: _shift_left,
}


def _narrow_int64(gm: torch.fx.GraphModule) -> None:
    """Captured int64 tensors whose values fit as int32, and, where all of them do,
    the int64 constants the trace made from them (a clamp's bound)."""
    wide = [(n, t) for n, t in gm.named_buffers() if t.dtype == torch.int64]  # (make_fx
    fits = [(n, t) for n, t in wide if not t.numel() or t.abs().max().item() < 2**31]
    for name, value in fits:                                      # keeps them there)
        setattr(gm, name, value.to(torch.int32))
    if len(fits) == len(wide):
        for node in gm.graph.nodes:
            if node.kwargs.get("dtype") is torch.int64:
                node.kwargs = {**node.kwargs, "dtype": torch.int32}
        gm.recompile()


# -- constant subscripts folded into the captured tensors ------------------------------
# A constant subscript (`edge_types[b, q, k, n]` for a loop's n, `interval[0]` of a
# row, a row's entries one by one) reaches Flex FLASH's code as a Python number where
# it stores a value ("Expected TensorSSA, but got <class 'int'>"). Its user slices the
# captured tensor beforehand (`starts = intervals[:, 0]`), and so do these rules.

def _constant(gm: torch.fx.GraphModule, node: object) -> int | None:
    """The integer a 0-d captured constant holds (a lifted Python int), else None."""
    if isinstance(node, fx.Node) and node.target is aten.lift_fresh_copy.default:
        node = node.args[0]
    if isinstance(node, fx.Node) and node.op == "get_attr":
        t = getattr(gm, node.target)
        if t.dim() == 0 and not t.is_floating_point() and t.dtype != torch.bool:
            return int(t)
    return None


def _captured_read(node: object) -> tuple[fx.Node, list[fx.Node]] | None:
    """(captured tensor, subscripts) of `captured[i, j, ...]`, else None."""
    if (isinstance(node, fx.Node) and node.target is aten.index.Tensor
            and node.args[0].op == "get_attr" and None not in node.args[1]):
        return node.args[0], list(node.args[1])
    return None


def _sliced(gm: torch.fx.GraphModule, base: fx.Node, picks: list[tuple[int, int]],
            subscripts: list[fx.Node], before: fx.Node) -> fx.Node:
    """`base` with each (dim, index) of `picks` taken out, read at `subscripts`."""
    t = getattr(gm, base.target)
    for dim, index in sorted(picks, reverse=True):
        t = t.select(dim, index)
    name = f"_flash_form_{sum(1 for _ in gm.buffers())}"
    gm.register_buffer(name, t.contiguous())
    with gm.graph.inserting_before(before):
        return gm.graph.call_function(aten.index.Tensor,
                                      (gm.graph.get_attr(name), subscripts))


def _fold_one(gm: torch.fx.GraphModule) -> bool:
    """Apply the first rule that matches; False when none does."""
    graph = gm.graph
    for node in graph.nodes:
        new = None
        read = _captured_read(node)
        if read is not None:  # captured[i, 3, k] -> captured[:, 3][i, k]
            base, subs = read
            consts = [_constant(gm, s) for s in subs]
            picks = [(d, c) for d, c in enumerate(consts) if c is not None]
            rest = [s for s, c in zip(subs, consts, strict=True) if c is None]
            if picks and rest:
                new = _sliced(gm, base, picks, rest, node)
        elif node.target in (aten.select.int, aten.index.Tensor):
            if node.target is aten.select.int:
                x, dim, index = node.args
            elif len(node.args[1]) == 1:
                x, dim, index = node.args[0], 0, _constant(gm, node.args[1][0])
            else:
                continue
            if index is None or not isinstance(x, fx.Node):
                continue
            inner = _captured_read(x)
            if inner is not None:  # captured[i][3] -> captured[:, 3][i]
                base, subs = inner
                rank = getattr(gm, base.target).dim() - len(subs)
                if rank > 0 and all(s.meta["val"].dim() == 0 for s in subs):
                    new = _sliced(gm, base, [(len(subs) + dim % rank, index)], subs, node)
            elif x.op == "call_function" and torch.Tag.pointwise in getattr(x.target, "tags", ()):
                new = _select_operands(graph, x, dim, index, node)  # (a == b)[3] -> a[3] == b[3]
            elif _undoes_unsqueeze(x, dim) and index == 0:
                new = x.args[0]  # x.unsqueeze(d)[..., 0 at d] -> x
        elif node.target is aten.squeeze.dim and _undoes_unsqueeze(node.args[0], node.args[1]):
            new = node.args[0].args[0]  # x.unsqueeze(d).squeeze(d) -> x
        if new is not None:
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            graph.eliminate_dead_code()
            gm.recompile()
            return True
    return False


def _undoes_unsqueeze(x: object, dim: int) -> bool:
    if not (isinstance(x, fx.Node) and x.target is aten.unsqueeze.default):
        return False
    rank = x.meta["val"].dim()
    return dim % rank == x.args[1] % rank


def _select_operands(graph: fx.Graph, op: fx.Node, dim: int, index: int,
                     before: fx.Node) -> fx.Node:
    rank = op.meta["val"].dim()
    args = []
    with graph.inserting_before(before):
        for a in op.args:
            val = a.meta.get("val") if isinstance(a, fx.Node) else None
            at = dim % rank - (rank - val.dim()) if isinstance(val, torch.Tensor) else -1
            if at < 0:  # (broadcast along that dimension, or not a tensor)
                args.append(a)
            elif val.shape[at] == 1:
                args.append(graph.call_function(aten.squeeze.dim, (a, at)))
            else:
                args.append(graph.call_function(aten.select.int, (a, at, index)))
        return graph.call_function(op.target, tuple(args), op.kwargs)


def _fold_constant_subscripts(gm: torch.fx.GraphModule, args: list[torch.Tensor],
                              rounds: int = 64) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    for _ in range(rounds):
        gm = make_fx(gm)(*args)  # (fresh shapes on every node)
        if not _fold_one(gm):
            break
    return gm


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
    gm = _fold_constant_subscripts(gm, args)
    _narrow_int64(gm)
    # (Flex reads a mod's arity from its signature: a GraphModule's is *args)
    if is_score:
        def score_form(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
            return gm(score, b, h, q_idx, kv_idx)
        return score_form

    def mask_form(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        return gm(b, h, q_idx, kv_idx)
    return mask_form
