"""Render hook expressions as tile-level torch code (the CuIR backend).

Index variables are the CuIR hook arguments: `b`, `h` (0-d int64 tensors),
`q_idx` [M, 1], `kv_idx` [1, N] and the score tile `s`; aux tensors are
locals bound from `self.aux`. Constants stay Python literals (operators and
torch.where accept them); every other value is a tensor, so min/max against a
constant become clamp. Floats are float32 like the CUDA hooks: aux reads of
other float dtypes are converted.
"""

from __future__ import annotations

import functools
import keyword
import math
from collections.abc import Callable, Mapping

import torch

from cubridge.transfer.expr import DType, Node, shared_subexpressions

TORCH_VARS = {"b": "b", "h": "h", "q": "q_idx", "k": "kv_idx", "score": "s"}
TORCH_DTYPES = {DType.BOOL: "torch.bool", DType.INT: "torch.int64", DType.FLOAT: "torch.float32"}

_TEMPLATES = {
    "neg": "(-{0})", "abs": "torch.abs({0})", "not": "(~{0})",
    "tanh": "torch.tanh({0})", "exp": "torch.exp({0})", "exp2": "torch.exp2({0})",
    "log": "torch.log({0})", "log2": "torch.log2({0})", "sigmoid": "torch.sigmoid({0})",
    "sqrt": "torch.sqrt({0})",
    "floor": "torch.floor({0})", "ceil": "torch.ceil({0})", "erf": "torch.erf({0})",
    "sin": "torch.sin({0})", "cos": "torch.cos({0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
    "floordiv": "({0} // {1})", "mod": "({0} % {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})",
    "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})",
    "where": "torch.where({0}, {1}, {2})",
    "bitand": "({0} & {1})", "bitor": "({0} | {1})", "bitxor": "({0} ^ {1})",
    "bitnot": "(~{0})", "shl": "({0} << {1})", "shr": "({0} >> {1})",
}


def py_literal(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "math.nan" if math.isnan(value) else ("math.inf" if value > 0 else "(-math.inf)")
    text = repr(value)
    return f"({text})" if text.startswith("-") else text


def render_torch(node: Node, aux_vars: Mapping[str, str],
                 aux_dtypes: Mapping[str, torch.dtype],
                 bound: Mapping[Node, str] | None = None) -> str:
    """`node` as a torch expression; `aux_vars` maps aux names to local names,
    `bound` names subexpressions already computed."""
    bound = bound or {}

    def go(n: Node) -> str:
        if n in bound:
            return bound[n]
        if n.op == "const":
            return py_literal(n.arg)
        if n.op == "var":
            return TORCH_VARS[n.arg]  # type: ignore[index]
        if n.op == "aux_load":
            name = aux_vars[n.arg]  # type: ignore[index]
            read = f"{name}[{', '.join(go(a) for a in n.args)}]" if n.args else name
            if n.dtype == DType.FLOAT and aux_dtypes[n.arg] != torch.float32:  # type: ignore[index]
                read += ".to(torch.float32)"
            return read
        if n.op == "aux_size":
            name, dim = n.arg  # type: ignore[misc]
            return f"torch.tensor({aux_vars[name]}.shape[{dim}])"
        if n.op == "cast":
            return f"{go(n.args[0])}.to({TORCH_DTYPES[n.dtype]})"
        if n.op in ("min", "max"):
            a, b = n.args
            limit = "max" if n.op == "min" else "min"
            if _python_scalar(b):
                return f"torch.clamp({go(a)}, {limit}={go(b)})"
            if _python_scalar(a):
                return f"torch.clamp({go(b)}, {limit}={go(a)})"
            return f"torch.{n.op}imum({go(a)}, {go(b)})"
        return _TEMPLATES[n.op].format(*(go(a) for a in n.args))

    return go(node)


def _python_scalar(n: Node) -> bool:
    """Whether n renders as a Python number (constants and arithmetic on them alone:
    `100 - 1`), which torch.minimum does not take."""
    return all(x.op not in ("var", "aux_load", "aux_size") for x in n.walk())


def render_torch_body(node: Node, aux_vars: Mapping[str, str],
                      aux_dtypes: Mapping[str, torch.dtype], indent: str = "        ") -> list[str]:
    """Statements computing `node`: `tN = ...` per repeated subexpression, then return."""
    bound: dict[Node, str] = {}
    lines = []
    for n in shared_subexpressions(node):
        lines.append(f"{indent}t{len(bound)} = {render_torch(n, aux_vars, aux_dtypes, bound)}")
        bound[n] = f"t{len(bound)}"
    return [*lines, f"{indent}return {render_torch(node, aux_vars, aux_dtypes, bound)}"]


@functools.lru_cache(maxsize=64)
def grid_function(node: Node) -> Callable[..., torch.Tensor]:
    """`fn(b, h, q_idx, kv_idx, *, score_=None, **aux)` evaluating `node` (a
    mask, or a score_mod of the scores `score_`) on broadcasting index
    tensors: the traced expression on a whole grid at once (block tables,
    mods-derived attention). Element by element it is what the mod computes,
    whatever the mod did with shapes, since the expression is per element.
    One function per expression, so callers may key caches by it."""
    reads = sorted(n.arg for n in node.walk() if n.op in ("aux_load", "aux_size")
                   and isinstance(n.arg, str)) + sorted(
        n.arg[0] for n in node.walk() if n.op == "aux_size")
    names = {r: (r if r.isidentifier() and not keyword.iskeyword(r) and r not in _GRID_NAMES
                 else f"aux_{i}") for i, r in enumerate(dict.fromkeys(reads))}
    dtypes = _AnyDtype()
    body = render_torch_body(node, names, dtypes, indent="    ")
    binds = [f"    {local} = aux[{name!r}]" for name, local in names.items()]
    source = "\n".join(["def grid_fn(b, h, q_idx, kv_idx, *, score_=None, **aux):",
                        "    s = score_", *binds, *body])
    scope: dict[str, object] = {"torch": torch, "math": math}
    exec(compile(source, f"<cubridge grid function {abs(hash(node)):x}>", "exec"), scope)
    return scope["grid_fn"]  # type: ignore[return-value]


_GRID_NAMES = {"b", "h", "q_idx", "kv_idx", "s", "aux", "torch", "math"} | {
    f"t{i}" for i in range(1000)}


class _AnyDtype(dict):
    """Aux dtypes for render_torch when they are not known ahead: float reads
    are converted to float32 whatever they are (a no-op for float32)."""

    def __getitem__(self, name: object) -> torch.dtype:
        return torch.float64  # anything but float32: the conversion is emitted
