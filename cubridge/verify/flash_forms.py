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

`with_number_constants` is the one rewrite made before the first call: a tensor
made inside a mod (`torch.tensor(0.5)`) gives Flex FLASH a wrong output, not an
error, so its user writes the number from the start (below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import fx

from cubridge.verify.error_text import error_summary

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


def _probe_args(is_score: bool, device: torch.device) -> list[torch.Tensor]:
    """A mod's arguments as Flex passes one element of them: 0-d, int32 indices."""
    index = [torch.zeros((), dtype=torch.int32, device=device) for _ in range(4)]
    return [torch.zeros((), device=device), *index] if is_score else index


def _as_mod(gm: torch.fx.GraphModule, is_score: bool) -> Callable[..., torch.Tensor]:
    # (Flex reads a mod's arity from its signature: a GraphModule's is *args)
    if is_score:
        def score_form(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
            return gm(score, b, h, q_idx, kv_idx)
        return score_form

    def mask_form(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        return gm(b, h, q_idx, kv_idx)
    return mask_form


def flash_form(fn: Callable[..., torch.Tensor] | None, is_score: bool,
               device: torch.device) -> Callable[..., torch.Tensor] | None:
    """`fn` (a score_mod if `is_score`, else a mask_mod) rewritten as above;
    None stays None."""
    if fn is None:
        return None
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.fx.experimental.proxy_tensor import make_fx

    args = _probe_args(is_score, device)
    with TransformGetItemToIndex():
        gm = make_fx(fn, decomposition_table=DECOMPOSITIONS)(*args)
    gm = _fold_constant_subscripts(gm, args)
    _narrow_int64(gm)
    return _as_mod(gm, is_score)


# -- tensors made in a mod, as Python numbers -----------------------------------------
# A tensor literal made in a mod (`up = torch.tensor(0.5)`) gives Flex FLASH a
# constant buffer that its kernel does not read ("Argument aux_data ... cannot be
# converted to a JitArgument"), and the output is wrong without an error
# (local_where_consts: relative error 0.42,
# bench/results/h100-trace-ops-row-choices-b01e7c4/). No first-call error tells its
# user; one who writes for Flex FLASH writes numbers for the tensors a mod makes
# (0.5; True for `torch.ones_like(q_idx, dtype=torch.bool)`), and so does
# `with_number_constants`, before the first call.

# What a mod calls to make a tensor, as PyTorch's functions and methods name them. The
# trace alone cannot tell: `torch.where(c, s, -inf)` traces to a scalar_tensor too.
FACTORIES = frozenset({"tensor", "as_tensor", "scalar_tensor", "full", "ones", "zeros",
                       "ones_like", "zeros_like", "full_like", "new_tensor", "new_full",
                       "new_ones", "new_zeros"})

# Factories whose tensor argument gives only a dtype, a device and a shape: a mod's
# arguments are 0-d, so what they make there is one number.
_SHAPE_ONLY = {aten.ones_like.default, aten.zeros_like.default, aten.full_like.default,
               aten.new_ones.default, aten.new_zeros.default, aten.new_full.default}


def _makes_tensors(fn: Callable[..., torch.Tensor], args: list[torch.Tensor]) -> bool:
    """Whether `fn` called on `args` calls one of FACTORIES."""
    from torch.overrides import TorchFunctionMode

    called = []

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            called.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Calls():
        fn(*args)
    return not FACTORIES.isdisjoint(called)


@dataclass(frozen=True)
class NumberForm:
    """A mod with the 0-d tensors made inside it as Python numbers (`mod`: the mod
    itself where it makes none, or makes one that no number can stand for), and
    what was done, for the peer's note ("" where nothing was)."""

    mod: Callable[..., torch.Tensor] | None
    numbers: tuple[object, ...] = ()  # the numbers written in, in the mod's order
    note: str = ""


def _made_in_mod(gm: torch.fx.GraphModule) -> list[fx.Node]:
    """The nodes whose values the mod makes itself: tensor literals (lifted),
    factories, shape-only factories of its arguments, and anything computed from
    those alone. Captured tensors are not made here (peer_forms binds their 0-d
    ones as numbers)."""
    made: list[fx.Node] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is aten.lift_fresh_copy.default or node.target in _SHAPE_ONLY:
            made.append(node)
        elif (all(i in made for i in node.all_input_nodes)
              and torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())
              and not str(node.target).startswith("aten.empty")):  # (no value to take)
            made.append(node)
    return made


def _values(gm: torch.fx.GraphModule, args: list[torch.Tensor],
            nodes: list[fx.Node]) -> dict[fx.Node, object]:
    """The values `nodes` take when `gm` runs on `args`."""
    wanted, seen = set(nodes), {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> object:
            value = super().run_node(n)
            if n in wanted:
                seen[n] = value
            return value

    Recorder(gm).run(*args)
    return seen


def _as_number(value: torch.Tensor) -> object:
    """The Python number of a 0-d real tensor, else None."""
    if value.dim() != 0 or value.is_complex():
        return None
    return value.item()


def _shown(number: object) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def with_number_constants(fn: Callable[..., torch.Tensor] | None, is_score: bool,
                          device: torch.device) -> NumberForm:
    """`fn` (a score_mod if `is_score`, else a mask_mod) with every 0-d tensor it
    makes as the Python number it holds, where the mod uses it (an operand; a
    literal used as a subscript stays: that is how Flex itself reads `row[0]`).
    The mod itself where it makes none, where it cannot be traced (Flex reports
    its own error then), or, saying why in the note, where a tensor it makes is no
    number (not 0-d), the mod returns it, or an op it feeds takes no number."""
    if fn is None:
        return NumberForm(None)
    from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
    from torch.fx.experimental.proxy_tensor import make_fx

    role = "score_mod" if is_score else "mask_mod"
    args = _probe_args(is_score, device)
    try:
        if not _makes_tensors(fn, args):
            return NumberForm(fn)
        with TransformGetItemToIndex():  # (subscripts as Flex traces them)
            gm = make_fx(fn)(*args)
    except Exception:  # noqa: BLE001 - nothing known of its constants, so none written
        return NumberForm(fn)
    made = _made_in_mod(gm)
    values = _values(gm, args, made)
    numbers: dict[fx.Node, object] = {}
    for node in made:
        for user in node.users:
            if user in made or not any(a is node for a in (*user.args,
                                                           *user.kwargs.values())):
                continue  # (a made value's own use, or a subscript in an index list)
            number = _as_number(values[node])
            if user.op == "output":
                why = "returns a tensor it makes"
            elif number is None:
                why = (f"makes a tensor of shape {tuple(values[node].shape)} "
                       f"({values[node].dtype})")
            else:
                numbers[node] = number
                continue
            return NumberForm(fn, note=f"{role} {why}, which no Python number stands for: "
                                       f"left as written")
    if not numbers:
        return NumberForm(fn)
    for user in {u for n in numbers for u in n.users if u not in made}:
        user.args = tuple(numbers.get(a, a) if isinstance(a, fx.Node) else a for a in user.args)
        user.kwargs = {k: numbers.get(v, v) if isinstance(v, fx.Node) else v
                       for k, v in user.kwargs.items()}
        if isinstance(user.target, torch._ops.OpOverload):
            # (the op's packet picks the overload that takes a number: where.self does
            # not, where.ScalarOther does)
            user.target = user.target.overloadpacket
    held = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    gm.graph.eliminate_dead_code()
    for name in held - {n.target for n in gm.graph.nodes if n.op == "get_attr"}:
        delattr(gm, name)  # (the literals now written as numbers)
    gm.recompile()
    written = tuple(v for _, v in dict.fromkeys((type(v), v) for v in numbers.values()))
    try:
        gm(*args)
    except Exception as exc:  # noqa: BLE001 - an op that takes no number: said, as written
        return NumberForm(fn, note=f"{role}'s tensors made in it left as written: with "
                                   f"numbers ({', '.join(map(_shown, written))}) it fails "
                                   f"({error_summary(exc, 120)})")
    return NumberForm(_as_mod(gm, is_score), written,
                      f"{role}'s tensors made in it as Python numbers "
                      f"({', '.join(map(_shown, written))})")
