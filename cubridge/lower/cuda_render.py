"""Render hook expressions as CUDA C++ (host and device).

Values: bool -> bool, int -> int (32-bit, as FlexAttention's indices), float
-> float. Integer floor division and modulo go through detail:: helpers with
Python/torch semantics. Aux tensors are read with cubridge::aux_load<T> from
their AuxArgs slot. Intervals (block classification) use the shared interval
renderer with the iv_* helpers of hook_helpers.cuh, or for integer-only masks
the ivi_* ones (render_int_interval).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import torch

from cubridge.transfer import interval
from cubridge.transfer.expr import DType, Node, shared_subexpressions

C_TYPES = {DType.BOOL: "bool", DType.INT: "int", DType.FLOAT: "float"}

# Element type that aux_load<T> reads, per aux dtype.
AUX_C_TYPES: dict[torch.dtype, str] = {
    torch.bool: "bool",
    torch.uint8: "uint8_t",
    torch.int8: "int8_t",
    torch.int16: "int16_t",
    torch.int32: "int32_t",
    torch.int64: "int64_t",
    torch.float32: "float",
    torch.float64: "double",
    torch.bfloat16: "cubridge::Bf16",  # (widened to float where read: hook_types.cuh)
    torch.float16: "cubridge::Fp16",
}


class RenderError(Exception):
    pass


def c_literal(value: object, dtype: DType) -> str:
    if dtype == DType.BOOL:
        return "true" if value else "false"
    if dtype == DType.INT:
        v = int(value)  # type: ignore[call-overload]
        if not -(2**31) <= v < 2**31:
            raise RenderError(f"integer constant {v} does not fit the hooks' 32-bit int")
        return f"({v})" if v < 0 else str(v)
    v = float(value)  # type: ignore[arg-type]
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"({text}f)" if v < 0 else f"{text}f"


_TEMPLATES = {
    "neg": "(-{0})", "abs": "detail::abs({0})", "not": "(!{0})",
    "tanh": "tanhf({0})", "exp": "expf({0})", "exp2": "exp2f({0})", "log": "logf({0})",
    "log2": "log2f({0})",
    "sigmoid": "detail::sigmoid({0})", "sqrt": "sqrtf({0})", "floor": "floorf({0})",
    "ceil": "ceilf({0})",
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
    "floordiv": "detail::floordiv({0}, {1})", "mod": "detail::mod({0}, {1})",
    "min": "detail::min({0}, {1})", "max": "detail::max({0}, {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})",
    # no short-circuit, as in torch: both sides' aux reads are unconditional, so the
    # compiler can share them between elements instead of predicating each one
    "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} != {1})",
    "where": "({0} ? {1} : {2})",
    "erf": "erff({0})", "sin": "sinf({0})", "cos": "cosf({0})",
    # 32-bit ints, as FlexAttention's int32 indices: left shifts go through
    # unsigned so that a negative operand wraps instead of being undefined
    "bitand": "({0} & {1})", "bitor": "({0} | {1})", "bitxor": "({0} ^ {1})",
    "bitnot": "(~{0})", "shl": "static_cast<int>(static_cast<unsigned>({0}) << {1})",
    "shr": "({0} >> {1})",
}

# score_mod and activation run on every score: the fast device forms (see
# hook_helpers.cuh); mask_mod keeps the exact ones
_FAST = {
    "tanh": "detail::fast_tanh({0})", "exp": "detail::fast_exp({0})",
    "exp2": "detail::fast_exp2({0})", "log": "detail::fast_log({0})",
    "sigmoid": "detail::fast_sigmoid({0})", "truediv": "detail::fast_div({0}, {1})",
    # sin.approx / cos.approx (hook_trig.cuh says why; pasted only where called)
    "sin": "detail::fast_sin({0})", "cos": "detail::fast_cos({0})",
}

# C names of the hook arguments for each index variable
ARG_NAMES = {"b": "b", "h": "h", "q": "q", "k": "k", "score": "s"}


def render_value(node: Node, slots: Mapping[str, int],
                 aux_dtypes: Mapping[str, torch.dtype],
                 bound: Mapping[Node, str] | None = None, fast: bool = False,
                 contiguous_aux: bool = False) -> str:
    """`node` as a C++ expression over (s, b, h, q, k, aux); subexpressions in
    `bound` are referred to by the given names; `fast` picks the fast device
    forms of float functions; `contiguous_aux` reads aux tensors as having a
    contiguous last dim (pack_aux makes them so), whose index then folds into
    immediate offsets. score_mod uses it (it runs on every score); mask_mod
    does not: there the folded addresses stayed live and spilled (document masks)."""
    bound = bound or {}
    templates = {**_TEMPLATES, **_FAST} if fast else _TEMPLATES

    def go(n: Node) -> str:
        if n in bound:
            return bound[n]
        if n.op == "const":
            return c_literal(n.arg, n.dtype)
        if n.op == "var":
            return ARG_NAMES[n.arg]  # type: ignore[index]
        if n.op == "aux_load":
            name = n.arg
            load_t = AUX_C_TYPES[aux_dtypes[name]]  # type: ignore[index]
            idx = ", ".join(go(a) for a in n.args) or "0"
            if n.args and contiguous_aux:
                read = (f"cubridge::aux_load_c<{load_t}, {len(n.args)}>"
                        f"(aux, {slots[name]}, {idx})")  # type: ignore[index]
            else:
                read = f"cubridge::aux_load<{load_t}>(aux, {slots[name]}, {idx})"  # type: ignore[index]
            c_type = C_TYPES[n.dtype]
            return read if load_t == c_type else f"static_cast<{c_type}>({read})"
        if n.op == "aux_size":
            name, dim = n.arg  # type: ignore[misc]
            return f"static_cast<int>(aux.t[{slots[name]}].size[{dim}])"
        if n.op == "cast":
            return f"static_cast<{C_TYPES[n.dtype]}>({go(n.args[0])})"
        if n.op in ("floordiv", "mod") and n.dtype == DType.INT and _power_of_two(n.args[1]):
            # floor division and modulo by 2^j are an arithmetic shift and a mask in
            # two's complement, whatever the sign: one instruction each, where C's signed
            # / and % need sign fix-ups (a dilated or strided mask's (q - k) % 2^j, a
            # block-wise mask's q // 512)
            d = n.args[1].arg
            return (f"({go(n.args[0])} & {d - 1})" if n.op == "mod"
                    else f"({go(n.args[0])} >> {d.bit_length() - 1})")
        if n.op in ("floordiv", "mod") and n.dtype == DType.INT and _plain_division(n):
            # a non-negative dividend and a positive constant divisor: C's / and %
            # are floor division and modulo there, without the sign fix-ups
            return f"({go(n.args[0])} {'/' if n.op == 'floordiv' else '%'} {go(n.args[1])})"
        if n.op in ("floordiv", "mod") and n.dtype == DType.INT and (
                shifted := _shifted_division(n)) is not None:
            # (a + c) with a >= 0: a + (c mod d) is non-negative and below 2^32 as an
            # unsigned, and congruent to a + c, so unsigned / and % give the floor forms
            # (floor division plus floor(c / d)) without the sign fix-ups: a position
            # offset such as (k - 16) % 28 takes two instructions instead of six
            a, c = shifted
            d = n.args[1].arg
            if n.args[0] in bound:  # (a shared a + c: the residue's offset from it, mod 2^32)
                u = f"(static_cast<unsigned>({bound[n.args[0]]}) + {(c % d - c) % 2**32}u)"
            else:
                u = f"(static_cast<unsigned>({go(a)}) + {c % d}u)"
            if n.op == "mod":
                return f"static_cast<int>({u} % {d}u)"
            quotient = f"static_cast<int>({u} / {d}u)"
            return quotient if c // d == 0 else f"({quotient} + {c_literal(c // d, DType.INT)})"
        if fast and n.op == "truediv" and n.args[1].op == "const" and n.args[1].arg:
            # division by a constant: multiply by its reciprocal (no SFU op, ~1 ulp)
            return f"({go(n.args[0])} * {c_literal(1.0 / n.args[1].arg, DType.FLOAT)})"
        return templates[n.op].format(*(go(a) for a in n.args))

    return go(node)


# Index ranges every hook call lies in (grid limits and positions below
# POSITION_LIMIT, which block_kind checks before using integer intervals; the
# kernel's tail positions are clamped into the sequence).
_INDEX_RANGES = {"b": (0.0, 65535.0), "h": (0.0, 65535.0), "q": (0.0, 2.0**31 - 1),
                 "k": (0.0, 2.0**31 - 1)}


@functools.lru_cache(maxsize=4096)
def _nonnegative(node: Node) -> bool:
    """Whether `node` is >= 0 for every index value (interval arithmetic; aux
    reads unknown)."""
    if not interval.has_rules(node):
        return False
    lang = interval.python_lang(lambda name: f"aux[{name!r}]")
    leaf = lang.leaf

    def safe_leaf(n: Node) -> str:  # aux sizes are sizes: never negative
        if n.op == "aux_size":
            return "iv.span(0, math.inf)"
        return leaf(n)

    code = interval.render(node, interval.IntervalLang(lang.call, safe_leaf, lang.true,
                                                       lang.false))
    env = {"iv": interval, "math": math, "aux": {}, **{v: r for v, r in _INDEX_RANGES.items()}}
    try:
        lo, _ = eval(code, env)  # noqa: S307 - code rendered from our own expression
    except (KeyError, TypeError, ValueError):  # an aux scalar read: unknown
        return False
    return lo >= 0


def _power_of_two(d: Node) -> bool:
    return (d.op == "const" and isinstance(d.arg, int) and not isinstance(d.arg, bool) and
            0 < d.arg < 2**31 and d.arg & (d.arg - 1) == 0)


def _plain_division(n: Node) -> bool:
    a, d = n.args
    return (d.op == "const" and isinstance(d.arg, int) and d.arg > 0 and _nonnegative(a))


def _shifted_division(n: Node) -> tuple[Node, int] | None:
    """(a, c) where n divides a + c (a - c) by a positive constant below 2^31, a is
    a non-negative int and c an int constant; else None."""
    x, d = n.args
    if not (d.op == "const" and isinstance(d.arg, int) and 0 < d.arg < 2**31):
        return None
    if x.op not in ("add", "sub"):
        return None
    a, c = x.args
    if x.op == "add" and a.op == "const":
        a, c = c, a
    if not (c.op == "const" and isinstance(c.arg, int) and not isinstance(c.arg, bool)
            and abs(c.arg) < 2**31 and a.dtype == DType.INT and _nonnegative(a)):
        return None
    return a, (c.arg if x.op == "add" else -c.arg)


def interval_lang(slots: Mapping[str, int],
                  aux_dtypes: Mapping[str, torch.dtype]) -> interval.IntervalLang:
    """C++ spelling of interval code; q and k are the locals `iv_q`, `iv_k`."""

    def leaf(n: Node) -> str:
        if n.op == "const":
            return f"detail::iv_point({_c_double(n.arg)})"
        if n.op == "var":
            return {"b": "detail::iv_point(b)", "h": "detail::iv_point(h)", "q": "iv_q",
                    "k": "iv_k"}[n.arg]  # type: ignore[index]
        if n.op == "aux_size":
            name, dim = n.arg  # type: ignore[misc]
            return f"detail::iv_point(static_cast<double>(aux.t[{slots[name]}].size[{dim}]))"
        if not n.args:  # 0-d aux scalar: exact at run time
            load_t = AUX_C_TYPES[aux_dtypes[n.arg]]  # type: ignore[index]
            return (f"detail::iv_point(static_cast<double>(cubridge::aux_load<{load_t}>"
                    f"(aux, {slots[n.arg]}, 0)))")  # type: ignore[index]
        return "detail::iv_unknown_bool()" if n.dtype == DType.BOOL else "detail::iv_unknown()"

    def call(name: str, args: list[str]) -> str:
        return f"detail::iv_{name}({', '.join(args)})"

    return interval.IntervalLang(call, leaf, "true", "false")


def _c_double(v: object) -> str:
    x = float(v)  # type: ignore[arg-type]
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    return repr(x) if x >= 0 else f"({x!r})"


def render_interval(node: Node, slots: Mapping[str, int],
                    aux_dtypes: Mapping[str, torch.dtype]) -> str:
    return interval.render(node, interval_lang(slots, aux_dtypes))


# Integer intervals (detail::IvI): positions and 0-d integer aux scalars below
# POSITION_LIMIT (block_kind checks them at run time), every bound below
# BOUND_LIMIT in magnitude.
POSITION_LIMIT = 2**24  # detail::ivi_in_range, detail::ivi_scalar_in_range
BOUND_LIMIT = 2**30
_INT_IV_COMPARE = {"lt", "le", "gt", "ge", "eq", "ne", "not", "and", "or", "xor"}


def int_interval_bound(node: Node) -> int | None:
    """Largest magnitude of any interval bound of `node` over positions and 0-d
    integer aux scalars below POSITION_LIMIT, or None when the integer interval
    form does not apply (floats, aux reads other than such scalars, division by
    a non-constant, a bound past BOUND_LIMIT). Where it applies, the double
    rules are exact, so both forms agree."""
    memo: dict[Node, int | None] = {}

    def rule(n: Node) -> int | None:
        if n.dtype == DType.FLOAT:
            return None
        if n.op == "const":
            return abs(int(n.arg))  # type: ignore[call-overload]
        if n.op == "var":
            return POSITION_LIMIT if n.arg in ("b", "h", "q", "k") else None
        if _int_scalar(n):
            return 1 if n.dtype == DType.BOOL else POSITION_LIMIT
        bounds = [go(a) for a in n.args]
        if not bounds or None in bounds:
            return None  # aux reads and sizes, or an argument out of reach
        a = [int(x) for x in bounds]  # type: ignore[arg-type]
        if n.op in ("floordiv", "mod"):
            d = n.args[1]
            if d.op != "const" or d.dtype != DType.INT or int(d.arg) == 0:  # type: ignore[call-overload]
                return None
            return a[0] + 1 if n.op == "floordiv" else a[1]
        if n.op in _INT_IV_COMPARE:
            return 1
        if n.op == "cast":
            return 1 if n.dtype == DType.BOOL else a[0]
        if n.op in ("neg", "abs"):
            return a[0]
        if n.op in ("add", "sub"):
            return a[0] + a[1]
        if n.op == "mul":
            return a[0] * a[1]
        if n.op in ("min", "max"):
            return max(a)
        if n.op == "where":
            return max(a[1:])
        return None

    def go(n: Node) -> int | None:
        if n not in memo:
            bound = rule(n)
            memo[n] = bound if bound is not None and bound < BOUND_LIMIT else None
        return memo[n]

    return go(node)


def _int_scalar(n: Node) -> bool:
    """A read of a 0-d integer (or bool) aux tensor: one value per launch."""
    return n.op == "aux_load" and not n.args and n.dtype in (DType.INT, DType.BOOL)


def int_interval_scalars(node: Node) -> list[str]:
    """The 0-d integer aux tensors the integer interval form of `node` reads,
    in first-use order (block_kind loads each once into `ivi_aux_<name>`)."""
    return list(dict.fromkeys(str(n.arg) for n in node.walk() if _int_scalar(n)))


def int_interval_lang() -> interval.IntervalLang:
    """C++ spelling of integer interval code (detail::ivi_*); q and k are the
    locals `ivi_q`, `ivi_k`, a 0-d aux scalar the local `ivi_aux_<name>` (int64_t,
    checked in range). Only for masks int_interval_bound accepts."""

    def leaf(n: Node) -> str:
        if n.op == "const":
            return f"detail::ivi_point({c_literal(int(n.arg), DType.INT)})"  # type: ignore[call-overload]
        if _int_scalar(n):
            return f"detail::ivi_point(static_cast<int>(ivi_aux_{n.arg}))"
        return {"b": "detail::ivi_point(b)", "h": "detail::ivi_point(h)", "q": "ivi_q",
                "k": "ivi_k"}[n.arg]  # type: ignore[index]

    def call(name: str, args: list[str]) -> str:
        return f"detail::ivi_{name}({', '.join(args)})"

    return interval.IntervalLang(call, leaf, "true", "false")


def render_int_interval(node: Node) -> str | None:
    """The mask's interval in integer form, or None where it does not apply."""
    if int_interval_bound(node) is None:
        return None
    return interval.render(node, int_interval_lang())


def render_body(node: Node, slots: Mapping[str, int],
                aux_dtypes: Mapping[str, torch.dtype], fast: bool = False,
                contiguous_aux: bool = False,
                pre_bound: Mapping[Node, str] | None = None) -> list[str]:
    """Statements computing `node`: one `const T tN = ...;` per repeated
    subexpression, then `return ...;`. Subexpressions in `pre_bound` are
    spelled as given (staged reads)."""
    bound: dict[Node, str] = dict(pre_bound or {})
    lines = []
    temps = 0
    for n in shared_subexpressions(node, leaves=bound):
        if n in bound:
            continue
        lines.append(f"  const {C_TYPES[n.dtype]} t{temps} = "
                     f"{render_value(n, slots, aux_dtypes, bound, fast, contiguous_aux)};")
        bound[n] = f"t{temps}"
        temps += 1
    return [*lines,
            f"  return {render_value(node, slots, aux_dtypes, bound, fast, contiguous_aux)};"]
