"""Interval arithmetic over hook expressions: block classification in closed form.

For a tile (q in [q_lo, q_hi], k in [k_lo, k_hi], b and h fixed) a mask
expression is evaluated on intervals: numbers as (lo, hi), bools as (lo, hi)
in {0, 1} (lo = 1: true for every pair; hi = 0: false for every pair). The
result classifies the tile: EMPTY if the mask is false everywhere, FULL if
true everywhere, PARTIAL otherwise. Every rule over-approximates, so the
classification is conservative: it may say PARTIAL for a tile that is in fact
FULL or EMPTY, never the reverse.

Bounds are doubles (exact for integers below 2**53). Float results are
widened by a few ulps of float32 so that the kernel's float32 evaluation of a
pair stays inside. Aux reads are unknown, except 0-d aux scalars and aux
sizes, which are exact at run time. A mask whose value is NaN is unsupported.

These helpers are also what generated code calls: the CuIR renderer emits
`iv.add(...)` calls to this module and the CUDA renderer emits `iv_add(...)`
calls to C++ helpers with the same semantics (cubridge/lower/hook_helpers.cuh);
for masks of integers and bools with small bounds it emits the same rules on
int bounds (`ivi_*`), where these double rules are exact.

Every rule is also monotone under inclusion (a sub-tile's interval lies in
the tile's), so a tile inside an EMPTY tile is EMPTY: kv_block_range finds the
EMPTY prefix and suffix of a query block's key range by binary search.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cubridge.ir.hooks import BlockKind
from cubridge.transfer.expr import DType, Node, const

Iv = tuple[float, float]

INF = math.inf
UNKNOWN: Iv = (-INF, INF)
UNKNOWN_BOOL: Iv = (0.0, 1.0)
# Relative widening of float results: 2**-18 is 64 float32 ulps, beyond the
# error of one float32 op or CUDA transcendental.
FLOAT_SLACK = 2.0**-18


def _fix(lo: float, hi: float) -> Iv:
    return (-INF if math.isnan(lo) else lo, INF if math.isnan(hi) else hi)


def point(v: float) -> Iv:
    return (float(v), float(v))


def span(lo: float, hi: float) -> Iv:
    return (float(lo), float(hi))


def fw(a: Iv) -> Iv:
    """Widen a float result by the float32 slack."""
    lo, hi = a
    return (lo - abs(lo) * FLOAT_SLACK - 1e-30, hi + abs(hi) * FLOAT_SLACK + 1e-30)


def to_int(a: Iv) -> Iv:
    return (float(math.trunc(a[0])) if math.isfinite(a[0]) else a[0],
            float(math.trunc(a[1])) if math.isfinite(a[1]) else a[1])


def neg(a: Iv) -> Iv:
    return (-a[1], -a[0])


def abs_(a: Iv) -> Iv:
    lo, hi = a
    if lo >= 0:
        return a
    if hi <= 0:
        return (-hi, -lo)
    return (0.0, max(-lo, hi))


def not_(a: Iv) -> Iv:
    return (1.0 - a[1], 1.0 - a[0])


def _apply(f, x: float) -> float:  # noqa: ANN001
    try:
        return f(x)
    except (ValueError, OverflowError):
        return math.nan


def mono(name: str, a: Iv) -> Iv:
    """A monotone non-decreasing float function on both ends."""
    f = _MONOTONE[name]
    return _fix(_apply(f, a[0]), _apply(f, a[1]))


def _exp(x: float) -> float:
    return INF if x > 709 else math.exp(x)


def _log(x: float) -> float:
    return -INF if x == 0 else math.log(x)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + _exp(-x))


_MONOTONE = {
    "tanh": math.tanh,
    "exp": _exp,
    "exp2": lambda x: INF if x > 1023 else 2.0**x,
    "log": _log,
    "log2": lambda x: -INF if x == 0 else math.log2(x),
    "sigmoid": _sigmoid,
    "sqrt": math.sqrt,
    "floor": lambda x: float(math.floor(x)) if math.isfinite(x) else x,
    "ceil": lambda x: float(math.ceil(x)) if math.isfinite(x) else x,
}


def add(a: Iv, b: Iv) -> Iv:
    return _fix(a[0] + b[0], a[1] + b[1])


def sub(a: Iv, b: Iv) -> Iv:
    return _fix(a[0] - b[1], a[1] - b[0])


def _corners(a: Iv, b: Iv, f) -> Iv:  # noqa: ANN001
    vals = [f(x, y) for x in a for y in b]
    if any(math.isnan(v) for v in vals):
        return UNKNOWN
    return (min(vals), max(vals))


def mul(a: Iv, b: Iv) -> Iv:
    return _corners(a, b, lambda x, y: x * y)


def _contains_zero(a: Iv) -> bool:
    return a[0] <= 0 <= a[1]


def truediv(a: Iv, b: Iv) -> Iv:
    if _contains_zero(b):
        return UNKNOWN
    return _corners(a, b, lambda x, y: x / y)


def floordiv(a: Iv, b: Iv) -> Iv:
    if _contains_zero(b):
        return UNKNOWN
    lo, hi = _corners(a, b, lambda x, y: x / y)
    return (math.floor(lo) if math.isfinite(lo) else lo, math.floor(hi) if math.isfinite(hi)
            else hi)


def mod(a: Iv, b: Iv, is_int: bool) -> Iv:
    """a - b * floor(a / b); the result has b's sign (Python/torch semantics)."""
    one = 1.0 if is_int else 0.0
    if b[0] == b[1] and b[0] != 0 and math.isfinite(a[0]) and math.isfinite(a[1]):
        c = b[0]
        f_lo, f_hi = math.floor(a[0] / c), math.floor(a[1] / c)
        if f_lo == f_hi:  # a stays within one period: mod is a shift there
            return (a[0] - c * f_lo, a[1] - c * f_lo)
    if b[0] > 0:
        return (0.0, b[1] - one)
    if b[1] < 0:
        return (b[0] + one, 0.0)
    return UNKNOWN


def min_(a: Iv, b: Iv) -> Iv:
    return (min(a[0], b[0]), min(a[1], b[1]))


def max_(a: Iv, b: Iv) -> Iv:
    return (max(a[0], b[0]), max(a[1], b[1]))


def lt(a: Iv, b: Iv) -> Iv:
    return (float(a[1] < b[0]), float(a[0] < b[1]))


def le(a: Iv, b: Iv) -> Iv:
    return (float(a[1] <= b[0]), float(a[0] <= b[1]))


def eq(a: Iv, b: Iv) -> Iv:
    always = a[0] == a[1] == b[0] == b[1]
    overlap = a[0] <= b[1] and b[0] <= a[1]
    return (float(always), float(overlap))


def and_(a: Iv, b: Iv) -> Iv:
    return (min(a[0], b[0]), min(a[1], b[1]))


def or_(a: Iv, b: Iv) -> Iv:
    return (max(a[0], b[0]), max(a[1], b[1]))


def xor(a: Iv, b: Iv) -> Iv:
    if a[0] == a[1] and b[0] == b[1]:
        return point(float(a[0] != b[0]))
    return UNKNOWN_BOOL


def where(c: Iv, a: Iv, b: Iv) -> Iv:
    if c[0] == 1:
        return a
    if c[1] == 0:
        return b
    return (min(a[0], b[0]), max(a[1], b[1]))


def kind(mask: Iv) -> BlockKind:
    if mask[1] == 0:
        return BlockKind.EMPTY
    if mask[0] == 1:
        return BlockKind.FULL
    return BlockKind.PARTIAL


def tanh(a: Iv) -> Iv:
    return mono("tanh", a)


def exp(a: Iv) -> Iv:
    return mono("exp", a)


def exp2(a: Iv) -> Iv:
    return mono("exp2", a)


def log(a: Iv) -> Iv:
    return mono("log", a)


def log2(a: Iv) -> Iv:
    return mono("log2", a)


def sigmoid(a: Iv) -> Iv:
    return mono("sigmoid", a)


def sqrt(a: Iv) -> Iv:
    return mono("sqrt", a)


def floor(a: Iv) -> Iv:
    return mono("floor", a)


def ceil(a: Iv) -> Iv:
    return mono("ceil", a)


# ---------------------------------------------------------------------------
# Rendering an expression as interval code (Python here, C++ in cubridge.lower)


# Ops with interval rules (here, and as iv_*/ivi_* in hook_helpers.cuh). A mask
# with any other op (bit operations, erf, sin, cos) is classified by table instead
# (cubridge.transfer.hooks): its tiles are evaluated, not bounded.
INTERVAL_OPS = frozenset({
    "const", "var", "aux_load", "aux_size", "cast", "neg", "abs", "not", "tanh", "exp",
    "exp2", "log", "log2", "sigmoid", "sqrt", "floor", "ceil", "add", "sub", "mul", "truediv",
    "floordiv", "mod", "min", "max", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "xor",
    "where",
})


def has_rules(node: Node) -> bool:
    """Whether every op of `node` has an interval rule."""
    return all(n.op in INTERVAL_OPS for n in node.walk())


@dataclass(frozen=True)
class IntervalLang:
    """How one backend spells interval code: a helper call (by its base name,
    as in `iv_<name>` of the C++ helpers) and a leaf (const, var, aux read)."""

    call: Callable[[str, list[str]], str]
    leaf: Callable[[Node], str]
    true: str
    false: str


def render(node: Node, lang: IntervalLang) -> str:
    """The interval of `node` as an expression of `lang`."""

    def go(n: Node) -> str:
        if n.op not in INTERVAL_OPS:
            raise ValueError(f"no interval rule for op {n.op!r}; classify such masks by table")
        if n.op in ("const", "var", "aux_load", "aux_size"):
            return lang.leaf(n)
        args = [go(a) for a in n.args]
        if n.op == "cast":
            src = n.args[0].dtype
            if n.dtype == DType.BOOL:
                return lang.call("not", [lang.call("eq", [args[0], lang.leaf(const(0))])])
            if n.dtype == DType.INT and src == DType.FLOAT:
                return lang.call("to_int", args)
            if n.dtype == DType.FLOAT and src == DType.INT:
                return lang.call("fw", args)
            return args[0]
        if n.op in ("gt", "ge"):
            out = lang.call({"gt": "lt", "ge": "le"}[n.op], [args[1], args[0]])
        elif n.op == "ne":
            out = lang.call("not", [lang.call("eq", args)])
        elif n.op == "mod":
            out = lang.call("mod", args + [lang.true if n.dtype == DType.INT else lang.false])
        else:
            out = lang.call(n.op, args)
        return lang.call("fw", [out]) if n.dtype == DType.FLOAT else out

    return go(node)


_PY_NAMES = {"abs": "abs_", "not": "not_", "min": "min_", "max": "max_", "and": "and_",
             "or": "or_"}


def python_lang(aux_ref: Callable[[str], str], module: str = "iv") -> IntervalLang:
    """Python interval code calling this module as `module`; `aux_ref(name)`
    is the Python expression of an aux tensor (e.g. self.aux['slopes'])."""

    def leaf(n: Node) -> str:
        if n.op == "const":
            return f"{module}.point({_py_number(n.arg)})"
        if n.op == "var":
            return str(n.arg)
        if n.op == "aux_size":
            name, dim = n.arg  # type: ignore[misc]
            return f"{module}.point({aux_ref(name)}.shape[{dim}])"
        if not n.args:  # 0-d aux: exact at run time
            return f"{module}.point(float({aux_ref(n.arg)}))"  # type: ignore[arg-type]
        return f"{module}.UNKNOWN_BOOL" if n.dtype == DType.BOOL else f"{module}.UNKNOWN"

    def call(name: str, args: list[str]) -> str:
        return f"{module}.{_PY_NAMES.get(name, name)}({', '.join(args)})"

    return IntervalLang(call, leaf, "True", "False")


def _py_number(v: object) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "math.nan" if math.isnan(v) else ("math.inf" if v > 0 else "-math.inf")
    return repr(float(v))  # type: ignore[arg-type]


def compile_mask(mask: Node) -> Callable[..., Iv]:
    """fn(b, h, q, k, aux) -> interval of the mask; b, h, q, k are intervals."""
    source = render(mask, python_lang(lambda name: f"aux[{name!r}]"))
    return eval(f"lambda b, h, q, k, aux: {source}", {"iv": _this_module(), "math": math})


def _this_module():  # noqa: ANN202
    return sys.modules[__name__]


def classify_block(mask: Node | Callable[..., Iv], b: int, h: int, q_range: tuple[int, int],
                   k_range: tuple[int, int],
                   aux: Mapping[str, object] | None = None) -> BlockKind:
    """Kind of the tile of queries [q0, q1) x keys [k0, k1) (pass in-bounds
    ranges). `mask` is an expression or compile_mask's result; `aux` gives the
    0-d aux scalars and the tensors whose sizes the mask reads."""
    (q0, q1), (k0, k1) = q_range, k_range
    if q1 <= q0 or k1 <= k0:
        return BlockKind.EMPTY
    fn = compile_mask(mask) if isinstance(mask, Node) else mask
    return kind(fn(point(b), point(h), span(q0, q1 - 1), span(k0, k1 - 1), aux or {}))
