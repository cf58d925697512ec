"""Trace FlexAttention-style mods into the hook expression IR.

A mod runs once on symbolic values: `Sym` stands for a scalar (an index, the
score, an aux element) and records each operation as an `expr.Node`. Aux
tensors become `SymAux` placeholders: indexing one with traced indices records
an aux read; a 0-d aux tensor is itself a scalar read. A tensor the mod
captures (closure, global) and indexes with a traced value is lifted to an aux
tensor (cubridge.transfer.captures); captured Python scalars and 0-d tensors
are constants of the trace.

Mods run on scalars, as FlexAttention runs them (per element, under vmap):
`intervals[i]` of a captured [N, 2] tensor is a row, and `row[0]` an element.
Torch functions are recognised by identity, not by name: a custom op named
like a torch op is not that op. Anything the IR cannot express (another torch
op, Python control flow on a traced value, math.* on a traced value) raises
`TraceError` naming the op and the spec's file:line.
"""

from __future__ import annotations

import inspect
import math
import os
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from cubridge.transfer import expr
from cubridge.transfer.captures import Captures
from cubridge.transfer.expr import DType, Node
from cubridge.transfer.simplify import simplify


class TraceError(Exception):
    """A mod uses something the hook IR cannot express; `where` is file:line."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where or user_location()
        super().__init__(f"{self.where}: {message}" if self.where else message)


_THIS_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_TORCH_PACKAGE = os.path.dirname(os.path.abspath(torch.__file__))


def user_location() -> str:
    """file:line of the innermost frame that is neither ours nor torch's: the
    line of the spec (or mod helper) that was executing."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if path.startswith(_THIS_PACKAGE) or path.startswith(_TORCH_PACKAGE):
            continue
        return f"{frame.filename}:{frame.lineno}"
    return ""


_TORCH_DTYPES: dict[torch.dtype, DType] = {
    torch.bool: DType.BOOL,
    torch.uint8: DType.INT,
    torch.int8: DType.INT,
    torch.int16: DType.INT,
    torch.int32: DType.INT,
    torch.int64: DType.INT,
    torch.float32: DType.FLOAT,
    torch.float64: DType.FLOAT,
    torch.bfloat16: DType.FLOAT,  # (read widened to float, as FlexAttention promotes them)
    torch.float16: DType.FLOAT,
}


def ir_dtype(dtype: torch.dtype, what: str, where: str | None = None) -> DType:
    """The hook IR's type of a tensor read; `where`: the line to blame (default:
    the spec line being traced)."""
    if dtype not in _TORCH_DTYPES:
        supported = ", ".join(str(d) for d in _TORCH_DTYPES)
        raise TraceError(f"{what} has dtype {dtype}; hooks read only {supported} (make_aux "
                         "can cast it, e.g. to float32)", where=where)
    return _TORCH_DTYPES[dtype]


# ---------------------------------------------------------------------------
# Symbolic values


def _lift(x: object) -> Node:
    """A traced value or a Python/torch scalar as a node."""
    if isinstance(x, Sym):
        return x.node
    if isinstance(x, Node):  # (handlers that compose ops pass nodes)
        return x
    if isinstance(x, bool | int | float):
        return expr.const(x)
    if isinstance(x, torch.Tensor) and x.numel() == 1 and x.dim() == 0:
        return expr.const(x.item())
    if isinstance(x, torch.Tensor):
        raise TraceError(
            f"a tensor of shape {list(x.shape)} used whole in a traced hook; hooks compute one "
            "scalar per (q, k) pair: index it with the traced indices (tensor[q_idx])")
    if isinstance(x, SymAux):
        raise TraceError(
            f"aux tensor {x.name!r} (rank {x.rank}) used as a value; index it "
            f"with {x.rank - len(x.prefix)} more index(es)"
        )
    raise TraceError(f"cannot use a value of type {type(x).__name__} in a traced hook")


def _op(op: str, *args: object) -> Sym:
    return Sym(expr.apply(op, *(_lift(a) for a in args)))


# bool + bool and bool * bool are bool in torch (logical or / and), where a bool
# beside a number does arithmetic: `(q >= k) * (q - k < W)` is a mask
_BOOL_ARITH = {"add": "or", "mul": "and"}


def _arith(op: str, a: object, b: object) -> Sym:
    x, y = _lift(a), _lift(b)
    if x.dtype == DType.BOOL and y.dtype == DType.BOOL:
        return Sym(expr.apply(_BOOL_ARITH[op], x, y))
    return Sym(expr.apply(op, x, y))


class Sym:
    """A traced scalar (broadcast tensor in torch terms)."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node

    def __repr__(self) -> str:
        return f"Sym({self.node!r})"

    # arithmetic
    def __add__(self, o: object) -> Sym: return _arith("add", self, o)
    def __radd__(self, o: object) -> Sym: return _arith("add", o, self)
    def __sub__(self, o: object) -> Sym: return _op("sub", self, o)
    def __rsub__(self, o: object) -> Sym: return _op("sub", o, self)
    def __mul__(self, o: object) -> Sym: return _arith("mul", self, o)
    def __rmul__(self, o: object) -> Sym: return _arith("mul", o, self)
    def __truediv__(self, o: object) -> Sym: return _op("truediv", self, o)
    def __rtruediv__(self, o: object) -> Sym: return _op("truediv", o, self)
    def __floordiv__(self, o: object) -> Sym: return _op("floordiv", self, o)
    def __rfloordiv__(self, o: object) -> Sym: return _op("floordiv", o, self)
    def __mod__(self, o: object) -> Sym: return _op("mod", self, o)
    def __rmod__(self, o: object) -> Sym: return _op("mod", o, self)
    def __neg__(self) -> Sym: return _op("neg", self)
    def __pos__(self) -> Sym: return self
    def __abs__(self) -> Sym: return _op("abs", self)
    def __pow__(self, o: object) -> Sym: return _pow(self, o)
    def __rpow__(self, o: object) -> Sym: return _pow(o, self)

    # comparisons
    def __lt__(self, o: object) -> Sym: return _op("lt", self, o)
    def __le__(self, o: object) -> Sym: return _op("le", self, o)
    def __gt__(self, o: object) -> Sym: return _op("gt", self, o)
    def __ge__(self, o: object) -> Sym: return _op("ge", self, o)
    def __eq__(self, o: object) -> Sym: return _op("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: object) -> Sym: return _op("ne", self, o)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    # logic on bools; bitwise on ints (as torch: & | ^ ~ mean either)
    def __and__(self, o: object) -> Sym: return _logic("and", self, o)
    def __rand__(self, o: object) -> Sym: return _logic("and", o, self)
    def __or__(self, o: object) -> Sym: return _logic("or", self, o)
    def __ror__(self, o: object) -> Sym: return _logic("or", o, self)
    def __xor__(self, o: object) -> Sym: return _logic("xor", self, o)
    def __rxor__(self, o: object) -> Sym: return _logic("xor", o, self)
    def __invert__(self) -> Sym: return _logic("not", self)
    def __lshift__(self, o: object) -> Sym: return _bits("shl", self, o)
    def __rlshift__(self, o: object) -> Sym: return _bits("shl", o, self)
    def __rshift__(self, o: object) -> Sym: return _bits("shr", self, o)
    def __rrshift__(self, o: object) -> Sym: return _bits("shr", o, self)

    # Python control flow and conversions cannot be traced
    def __bool__(self) -> bool:
        raise TraceError(
            "Python control flow (if/and/or/while) on a traced value; use torch.where or &, |, ~"
        )

    def __index__(self) -> int:
        raise TraceError("a traced value used as a Python int (e.g. range(), list index)")

    def __int__(self) -> int:
        raise TraceError("int() of a traced value; use .to(torch.int32) or // instead")

    def __float__(self) -> float:
        raise TraceError("float() of a traced value (math.* functions); use the torch.* op")

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype a FlexAttention mod would see (indices are int64)."""
        return {DType.BOOL: torch.bool, DType.INT: torch.int64,
                DType.FLOAT: torch.float32}[self.node.dtype]

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def unsqueeze(self, dim: int) -> SymVec:
        """x.unsqueeze(-1): a one-element vector, to compare with a row."""
        if dim not in (-1, 0):
            raise TraceError(f"unsqueeze({dim}) of a traced scalar; only -1 (a vector of one)")
        return SymVec((self,))

    def __getattr__(self, name: str) -> Callable[..., Sym]:
        # a method call on a traced value: the tensor method of that name
        if name.startswith("__"):
            raise AttributeError(name)
        handler = _TORCH_OPS.get(name)
        if handler is None or name in _FUNCTION_ONLY:
            raise TraceError(f"unsupported tensor method .{name}() in a traced hook")
        return lambda *a, **kw: handler(self, *a, **kw)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is _TENSOR_GETITEM and isinstance(args[0], torch.Tensor):
            return _captured(args[0])[args[1]]  # a captured tensor indexed by a traced value
        handler = _FUNCTIONS.get(func)
        if handler is None:
            raise TraceError(f"unsupported op {describe_function(func)} in a traced hook")
        return handler(*args, **(kwargs or {}))


class SymVec:
    """A short vector per (q, k) pair: a row of a captured tensor, or a traced
    scalar unsqueezed to compare with one. Elementwise ops broadcast a vector of
    one; any/all/sum over the last dim reduce it to a scalar (unrolled reads)."""

    def __init__(self, items: tuple[Sym, ...]) -> None:
        self.items = items

    def _map(self, o: object, fn: Callable[[Sym, object], Sym]) -> SymVec:
        other = o.row() if isinstance(o, SymAux) else o
        if isinstance(other, SymVec):
            a, b = self.items, other.items
            if len(a) != len(b) and 1 not in (len(a), len(b)):
                raise TraceError(f"vectors of {len(a)} and {len(b)} elements do not broadcast")
            n = max(len(a), len(b))
            return SymVec(tuple(fn(a[i if len(a) > 1 else 0], b[i if len(b) > 1 else 0])
                                for i in range(n)))
        return SymVec(tuple(fn(x, other) for x in self.items))

    def __eq__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a == b)  # type: ignore[override]
    def __ne__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a != b)  # type: ignore[override]
    def __lt__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a < b)
    def __le__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a <= b)
    def __gt__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a > b)
    def __ge__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a >= b)
    def __and__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a & b)
    def __or__(self, o: object) -> SymVec: return self._map(o, lambda a, b: a | b)
    __hash__ = None  # type: ignore[assignment]

    def _reduce(self, op: str, dim: int) -> Sym:
        if dim not in (-1, 0):
            raise TraceError(f"reduction over dim {dim} of a row; only its last dim")
        out = self.items[0]
        for x in self.items[1:]:
            out = {"any": lambda a, b: a | b, "all": lambda a, b: a & b,
                   "sum": lambda a, b: a + b}[op](out, x)
        return out

    def any(self, dim: int = -1) -> Sym: return self._reduce("any", dim)
    def all(self, dim: int = -1) -> Sym: return self._reduce("all", dim)
    def sum(self, dim: int = -1) -> Sym: return self._reduce("sum", dim)

    def __getattr__(self, name: str) -> object:
        raise TraceError(f"unsupported use of a row (a vector per pair): .{name}; reduce it "
                         "with .any(-1), .all(-1) or .sum(-1)")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        for op in ("any", "all", "sum"):
            if func in (getattr(torch, op), getattr(torch.Tensor, op)):
                dim = (kwargs or {}).get("dim", args[1] if len(args) > 1 else -1)
                return args[0]._reduce(op, dim)
        raise TraceError(f"unsupported op {describe_function(func)} on a row (a vector per "
                         "pair); reduce it with .any(-1), .all(-1) or .sum(-1)")


class SymAux:
    """An aux tensor during tracing: index it to read an element."""

    def __init__(self, name: str, tensor: torch.Tensor, prefix: tuple[Node, ...] = (),
                 captured: bool = False) -> None:
        self.name = name
        self.tensor = tensor
        self.rank = tensor.dim()
        self.prefix = prefix
        self.captured = captured

    def row(self) -> SymVec:
        """The last dim of a captured tensor, indexed down to it, as a vector of
        reads (its length is the captured tensor's, fixed when traced)."""
        if not self.captured or len(self.prefix) != self.rank - 1:
            raise TraceError(
                f"aux tensor {self.name!r} used as a value with {self.rank - len(self.prefix)} "
                "dims left; hooks read elements (a captured tensor's last dim may be used as "
                "a row and reduced: (row == x).any(-1))")
        return SymVec(tuple(self[i] for i in range(self.tensor.shape[-1])))  # type: ignore[misc]

    def __eq__(self, o: object) -> SymVec: return self.row() == o  # type: ignore[override]
    def __ne__(self, o: object) -> SymVec: return self.row() != o  # type: ignore[override]
    def __lt__(self, o: object) -> SymVec: return self.row() < o
    def __le__(self, o: object) -> SymVec: return self.row() <= o
    def __gt__(self, o: object) -> SymVec: return self.row() > o
    def __ge__(self, o: object) -> SymVec: return self.row() >= o
    __hash__ = None  # type: ignore[assignment]

    @property
    def shape(self) -> tuple[Sym, ...]:
        """Sizes read at run time (a hook must not bake one shape in)."""
        return tuple(
            Sym(Node("aux_size", DType.INT, arg=(self.name, d)))
            for d in range(len(self.prefix), self.rank)
        )

    def size(self, dim: int | None = None) -> Sym | tuple[Sym, ...]:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.rank - len(self.prefix)

    def __getitem__(self, index: object) -> Sym | SymAux:
        items = index if isinstance(index, tuple) else (index,)
        nodes = []
        for i in items:
            if i is Ellipsis or i is None or isinstance(i, slice):
                raise TraceError(
                    f"aux tensor {self.name!r} indexed with {i!r}; hooks read single elements"
                )
            node = _lift(i)
            if node.dtype == DType.FLOAT:
                raise TraceError(f"aux tensor {self.name!r} indexed with a float expression")
            nodes.append(expr.cast(node, DType.INT))
        full = self.prefix + tuple(nodes)
        if len(full) > self.rank:
            raise TraceError(
                f"aux tensor {self.name!r} has rank {self.rank} but got {len(full)} indices"
            )
        if len(full) < self.rank:
            return SymAux(self.name, self.tensor, full, self.captured)
        return Sym(Node("aux_load", ir_dtype(self.tensor.dtype, f"aux {self.name!r}"), full,
                        arg=self.name))

    def __getattr__(self, name: str) -> object:
        raise TraceError(f"unsupported use of aux tensor {self.name!r}: .{name}")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        whole = next(a for a in (*args, *(kwargs or {}).values()) if isinstance(a, SymAux))
        what = (f"aux tensor {whole.name!r}" if not whole.prefix else
                f"a rank-{whole.dim()} slice of aux tensor {whole.name!r}")
        raise TraceError(f"unsupported op {describe_function(func)} on {what}: hooks compute "
                         "one scalar per (q, k) pair; index down to an element first")


# ---------------------------------------------------------------------------
# torch functions and tensor methods, by name: name -> handler(*args, **kwargs)


_BITWISE = {"and": "bitand", "or": "bitor", "xor": "bitxor", "not": "bitnot"}
_SYMBOLS = {"and": "&", "or": "|", "xor": "^", "not": "~", "shl": "<<", "shr": ">>"}


def _logic(op: str, *args: object) -> Sym:
    """& | ^ ~: logical on bools, bitwise on integers (a bool operand beside an
    integer one is promoted, as in torch)."""
    nodes = [_lift(a) for a in args]
    if all(n.dtype == DType.BOOL for n in nodes):
        return Sym(expr.apply(op, *nodes))
    return _bits(_BITWISE[op], *args, symbol=_SYMBOLS[op])


def _bits(op: str, *args: object, symbol: str | None = None) -> Sym:
    nodes = [_lift(a) for a in args]
    for n in nodes:
        if n.dtype == DType.FLOAT:
            raise TraceError(f"bitwise {symbol or _SYMBOLS[op]} on a float value; "
                             "it takes integers or bools")
    return Sym(expr.apply(op, *nodes))


# torch.isin against a constant set is an OR of one equality a member, each a comparison
# per pair; past this many, a captured table indexed by the value is one read instead
MAX_ISIN_SET = 32


def _isin(elements: object, test_elements: object, *, assume_unique: bool = False,
          invert: bool = False) -> Sym:
    """torch.isin(x, SET) of a traced x and a constant SET (a tensor or a number) of at
    most MAX_ISIN_SET distinct numbers: (x == c0) | (x == c1) | ..."""
    x = _lift(elements)
    tests = [expr.apply("eq", x, expr.const(c)) for c in _constant_set(test_elements)]
    out = tests[0] if tests else expr.const(False)
    for t in tests[1:]:
        out = expr.apply("or", out, t)
    return Sym(expr.apply("not", out) if invert else out)


def _constant_set(test_elements: object) -> list[bool | int | float]:
    """The distinct numbers of torch.isin's test_elements, in order; a TraceError where
    they are traced or past MAX_ISIN_SET."""
    if isinstance(test_elements, Sym | SymAux | SymVec):
        what = (f"aux tensor {test_elements.name!r}" if isinstance(test_elements, SymAux)
                else "a value traced per pair")
        raise TraceError(f"torch.isin against {what}; hooks take a constant set (a tensor "
                         f"the spec holds) of at most {MAX_ISIN_SET} numbers")
    values = (test_elements.flatten().tolist() if isinstance(test_elements, torch.Tensor)
              else [_lift(test_elements).arg])  # (a number: torch takes no list)
    members = list(dict.fromkeys(values))
    if len(members) > MAX_ISIN_SET:
        raise TraceError(f"torch.isin against a set of {len(members)} numbers; hooks take at "
                         f"most {MAX_ISIN_SET} (one comparison per pair each): index a "
                         "captured bool table by the value instead (table[x])")
    return members


def _gelu(x: object, approximate: str = "none") -> Sym:
    """torch.nn.functional.gelu, written with the ops it is defined by."""
    v = Sym(expr.cast(_lift(x), DType.FLOAT))
    if approximate == "none":
        return 0.5 * v * (1.0 + _op("erf", v * 0.7071067811865476))
    if approximate == "tanh":
        return 0.5 * v * (1.0 + _op("tanh", 0.7978845608028654 * (v + 0.044715 * v * v * v)))
    raise TraceError(f"unsupported gelu(approximate={approximate!r})")


def _float(x: object) -> Sym:
    return Sym(expr.cast(_lift(x), DType.FLOAT))


# Functions written with the ops they are defined by (the IR keeps few ops; the
# rounding differs from torch's fused forms by a float32 ulp or so, far inside
# check_trace's tolerance and the verifiers').
_COMPOSED: dict[str, Callable[..., Sym]] = {
    "log1p": lambda x, *a, **kw: _op("log", 1.0 + _float(x)),
    "expm1": lambda x, *a, **kw: _op("exp", _float(x)) - 1.0,
    "log10": lambda x, *a, **kw: _op("log", x) * (1.0 / math.log(10.0)),  # (inexact at 10^n)
    "rsqrt": lambda x, *a, **kw: 1.0 / _op("sqrt", x),
    "reciprocal": lambda x, *a, **kw: 1.0 / _float(x),
}


# constant integer exponents written as products (x ** 3 = x * x * x)
_POW_UNROLL = 8


def _pow(x: object, p: object) -> Sym:
    exponent = _lift(p)
    if exponent.op == "const" and not isinstance(exponent.arg, bool):
        e = exponent.arg
        # a float exponent makes an integer base float, as torch does
        v = _float(x) if exponent.dtype == DType.FLOAT else Sym(_lift(x))
        if e == 0.5:
            return _op("sqrt", v)
        if e == -0.5:
            return 1.0 / _op("sqrt", v)
        if e == int(e) and abs(e) <= _POW_UNROLL:
            n = int(abs(e))
            if e < 0 and v.node.dtype != DType.FLOAT:
                raise TraceError("integers to negative integer powers are not allowed (as in "
                                 "torch); make the base float")
            if n == 0:
                return Sym(expr.cast(expr.const(1), v.node.dtype))
            out = v
            for _ in range(n - 1):
                out = _op("mul", out, v)
            return 1.0 / out if e < 0 else out
        raise TraceError(f"unsupported op pow with exponent {e!r} (only integers up to "
                         f"{_POW_UNROLL} in magnitude, 0.5 and -0.5)")
    # a traced exponent of a positive constant base, ALiBi's `2 ** (-8 * (h + 1) / H)`:
    # c ** e = exp2(log2(c) * e) (a float result, as torch gives for a float operand)
    base = _lift(x)
    if (base.op == "const" and not isinstance(base.arg, bool) and base.arg > 0
            and DType.FLOAT in (base.dtype, exponent.dtype)):
        return _op("exp2", _op("mul", math.log2(base.arg), Sym(_cast(exponent, DType.FLOAT))))
    raise TraceError("unsupported op pow with a traced exponent (only a positive constant "
                     "base with a float base or exponent: 2.0 ** x)")


def _clamp(x: object, min: object = None, max: object = None) -> Sym:  # noqa: A002
    out = x if isinstance(x, Sym) else Sym(_lift(x))
    if min is not None:
        out = _op("max", out, min)
    if max is not None:
        out = _op("min", out, max)
    return out  # type: ignore[return-value]


def _minmax(op: str) -> Callable[..., Sym]:
    def handler(a: object, b: object = None, *rest: object, **kw: object) -> Sym:
        if b is None or rest or kw:
            raise TraceError(f"unsupported form of torch.{op}: only the two-tensor form")
        return _op(op, a, b)

    return handler


def _div(a: object, b: object, rounding_mode: str | None = None) -> Sym:
    if rounding_mode is None:
        return _op("truediv", a, b)
    if rounding_mode == "floor":
        return _op("floordiv", a, b)
    if rounding_mode == "trunc":
        return _trunc_div(a, b)
    raise TraceError(f"unsupported op torch.div(rounding_mode={rounding_mode!r})")


def _nonnegative(n: Node) -> bool:
    """Whether `n` is >= 0 by its form: the indices, aux sizes, non-negative integer
    constants and what +, *, //, %, min keep non-negative (a sound, syntactic test)."""
    if n.op == "var":
        return n.arg != expr.SCORE_VAR
    if n.op == "aux_size":
        return True
    if n.op == "const":
        return n.dtype == DType.INT and n.arg >= 0
    if n.op == "abs" and n.dtype == DType.INT:
        return True
    if n.op == "cast":
        return n.args[0].dtype == DType.BOOL or (n.dtype == DType.INT and _nonnegative(n.args[0]))
    if n.op in ("add", "mul", "floordiv", "mod", "min") and n.dtype == DType.INT:
        return all(_nonnegative(a) for a in n.args)
    if n.op == "max" and n.dtype == DType.INT:
        return any(_nonnegative(a) for a in n.args)
    return False


def _positive_int(n: Node) -> bool:
    return n.op == "const" and n.dtype == DType.INT and n.arg > 0


def _trunc(x: object) -> Sym:
    """torch.trunc: rounding toward zero (integers are unchanged)."""
    node = _lift(x)
    if node.dtype != DType.FLOAT:
        return Sym(node)
    return _op("where", _op("lt", node, 0.0), _op("ceil", node), _op("floor", node))


def _trunc_div(a: object, b: object) -> Sym:
    """torch.div(a, b, rounding_mode="trunc"): the quotient rounded toward zero, as C's
    integer `/`. Integers: the floor quotient, plus one where it was inexact and the
    operands' signs differ (only the floor quotient where the dividend is non-negative
    by its form and the divisor a positive constant); floats: trunc(a / b)."""
    x, y = _lift(a), _lift(b)
    if DType.FLOAT in (x.dtype, y.dtype):
        return _trunc(_op("truediv", x, y))
    floor = _op("floordiv", x, y)
    if _nonnegative(x) and _positive_int(y):
        return floor
    inexact = _op("ne", _op("mod", x, y), 0)
    signs_differ = _op("ne", _op("lt", x, 0), _op("lt", y, 0))
    return _op("where", _op("and", inexact, signs_differ), floor + 1, floor)


def _fmod(a: object, b: object) -> Sym:
    """torch.fmod: the remainder of the truncated division (the dividend's sign, as C's
    `%`): the floor modulo, less the divisor where that is non-zero and the operands'
    signs differ (only the floor modulo where the dividend is non-negative by its form
    and the divisor a positive constant)."""
    x, y = _lift(a), _lift(b)
    if x.dtype == DType.BOOL or y.dtype == DType.BOOL:
        x, y = expr.cast(x, DType.INT), expr.cast(y, DType.INT)
    rem = _op("mod", x, y)
    if _nonnegative(x) and _positive_int(y):
        return rem
    zero = 0.0 if rem.node.dtype == DType.FLOAT else 0
    fix = _op("and", _op("ne", rem, zero), _op("ne", _op("lt", x, zero), _op("lt", y, zero)))
    return _op("where", fix, rem - Sym(y), rem)


def _sign(x: object) -> Sym:
    """torch.sign / sgn: 1, -1 or the value itself (0, and NaN for floats)."""
    node = _lift(x)
    if node.dtype == DType.BOOL:
        return Sym(node)
    one = 1.0 if node.dtype == DType.FLOAT else 1
    zero = 0.0 if node.dtype == DType.FLOAT else 0
    return _op("where", _op("gt", node, zero), one,
               _op("where", _op("lt", node, zero), -one, node))


def _softplus(x: object, beta: float = 1.0, threshold: float = 20.0) -> Sym:
    """torch.nn.functional.softplus: log(1 + exp(beta x)) / beta, x past the threshold."""
    v = _float(x)
    bx = v * beta if beta != 1 else v
    soft = _op("log", 1.0 + _op("exp", bx))
    return _op("where", _op("gt", bx, float(threshold)), v,
               soft / beta if beta != 1 else soft)


def _logsigmoid(x: object) -> Sym:
    """torch.nn.functional.logsigmoid, in its stable form min(x, 0) - log(1 + exp(-|x|))."""
    v = _float(x)
    return _op("min", v, 0.0) - _op("log", 1.0 + _op("exp", -_op("abs", v)))


def _silu(x: object, *a: object, **kw: object) -> Sym:
    v = _float(x)
    return v * _op("sigmoid", v)


def _hardtanh(x: object, min_val: float = -1.0, max_val: float = 1.0, *a: object,
              **kw: object) -> Sym:
    return _clamp(x, min_val, max_val)


def _leaky_relu(x: object, negative_slope: float = 0.01, *a: object, **kw: object) -> Sym:
    v = _lift(x)
    zero = 0.0 if v.dtype == DType.FLOAT else 0
    return _op("where", _op("gt", v, zero), v, _op("mul", v, negative_slope))


def _type_as(x: object, other: object) -> Sym:
    return Sym(_cast(_lift(x), _lift(other).dtype))


_TORCH_TO_IR = {torch.bool: DType.BOOL, torch.float32: DType.FLOAT, torch.float64: DType.FLOAT,
                torch.int32: DType.INT, torch.int64: DType.INT}


def _to(x: object, dtype: object = None, *args: object, **kwargs: object) -> Sym:
    dtype = kwargs.get("dtype", dtype)
    if not isinstance(dtype, torch.dtype):  # .to(device) and friends change nothing here
        return x if isinstance(x, Sym) else Sym(_lift(x))
    if dtype not in _TORCH_TO_IR:
        raise TraceError(f"unsupported cast .to({dtype}) (use bool, int32, int64 or float32)")
    return Sym(_cast(_lift(x), _TORCH_TO_IR[dtype]))


def _cast(x: Node, dtype: DType) -> Node:
    return expr.cast(x, dtype)


def _constant_dtype(x: object, dtype: object) -> DType:
    """The dtype of a constant made like x (`ones_like(x, dtype=...)`, `x.new_tensor`)."""
    if dtype is None:
        return _lift(x).dtype
    if dtype not in _TORCH_TO_IR:
        raise TraceError(f"unsupported dtype={dtype} (use bool, int32, int64 or float32)")
    return _TORCH_TO_IR[dtype]


def _like(value: object) -> Callable[..., Sym]:
    def handler(x: object, fill: object = None, *, dtype: object = None, **kw: object) -> Sym:
        v = fill if value is None else value
        if isinstance(v, torch.Tensor):
            v = _lift(v).arg
        return Sym(expr.const(expr.cast_value(v, _constant_dtype(x, dtype))))

    return handler


def _new_tensor(x: object, data: object, *, dtype: object = None, **kw: object) -> Sym:
    """x.new_tensor(scalar): a constant of x's dtype (or dtype=)."""
    if not isinstance(data, bool | int | float) and not (
            isinstance(data, torch.Tensor) and data.dim() == 0):
        raise TraceError("new_tensor of a non-scalar; hooks compute one scalar per pair")
    return Sym(expr.const(expr.cast_value(_lift(data).arg, _constant_dtype(x, dtype))))


def _new(value: object) -> Callable[..., Sym]:
    """x.new_ones / new_zeros / new_full: a constant (it broadcasts like a 0-d tensor)."""

    def handler(x: object, size: object = (), fill: object = None, *, dtype: object = None,
                **kw: object) -> Sym:
        v = fill if value is None else value
        target = _TORCH_TO_IR.get(dtype, _lift(x).dtype) if dtype is not None else _lift(x).dtype
        return Sym(expr.const(expr.cast_value(v, target)))

    return handler


def _unary(op: str) -> Callable[..., Sym]:
    return lambda x, *a, **kw: _op(op, x)


def _binary(op: str, swap: bool = False, arith: bool = False) -> Callable[..., Sym]:
    f = (lambda o, *a: _arith(o, *a)) if arith else _op
    return (lambda a, b, **kw: f(op, b, a)) if swap else (lambda a, b, **kw: f(op, a, b))


def _add(a: object, b: object, *, alpha: object = 1, **kw: object) -> Sym:
    """torch.add(a, b, alpha=c): a + c * b."""
    return _arith("add", a, b if _is_one(alpha) else _arith("mul", alpha, b))


def _sub(a: object, b: object, *, alpha: object = 1, **kw: object) -> Sym:
    """torch.sub(a, b, alpha=c): a - c * b."""
    return _op("sub", a, b if _is_one(alpha) else _arith("mul", alpha, b))


def _is_one(alpha: object) -> bool:
    return isinstance(alpha, int | float) and not isinstance(alpha, bool) and alpha == 1


def _relu(x: object, *a: object, **kw: object) -> Sym:
    return _op("max", x, 0.0 if _lift(x).dtype == DType.FLOAT else 0)


def _where(cond: object, a: object, b: object) -> Sym:
    if _lift(cond).dtype != DType.BOOL:
        raise TraceError("torch.where condition is not a bool expression")
    return _op("where", cond, a, b)


_TORCH_OPS: dict[str, Callable[..., Sym]] = {
    "where": _where,
    "abs": _unary("abs"), "__abs__": _unary("abs"),
    "neg": _unary("neg"), "negative": _unary("neg"), "__neg__": _unary("neg"),
    "tanh": _unary("tanh"), "exp": _unary("exp"), "exp2": _unary("exp2"),
    "log": _unary("log"), "log2": _unary("log2"), "sigmoid": _unary("sigmoid"),
    "sqrt": _unary("sqrt"),
    "floor": _unary("floor"), "ceil": _unary("ceil"), "erf": _unary("erf"),
    "sin": _unary("sin"), "cos": _unary("cos"),
    "expit": _unary("sigmoid"), "gelu": _gelu,
    "relu": _relu,
    "minimum": _minmax("min"), "maximum": _minmax("max"),
    "min": _minmax("min"), "max": _minmax("max"), "fmin": _minmax("min"), "fmax": _minmax("max"),
    "clamp": _clamp, "clip": _clamp,
    "clamp_min": lambda x, min, **kw: _clamp(x, min=min),  # noqa: A006
    "clamp_max": lambda x, max, **kw: _clamp(x, max=max),  # noqa: A006
    "sign": _sign, "sgn": _sign, "trunc": _trunc, "fix": _trunc,
    "fmod": _fmod,
    "softplus": _softplus, "logsigmoid": _logsigmoid, "silu": _silu,
    "hardtanh": _hardtanh, "leaky_relu": _leaky_relu,
    "type_as": _type_as, "double": lambda x: _to(x, torch.float64),
    "new_tensor": _new_tensor,
    "add": _add, "__add__": _add, "__radd__": lambda a, b, **kw: _add(b, a),
    "sub": _sub, "subtract": _sub, "__sub__": _binary("sub"),
    "__rsub__": _binary("sub", True), "rsub": lambda a, b, **kw: _sub(b, a, **kw),
    "mul": _binary("mul", arith=True), "multiply": _binary("mul", arith=True),
    "__mul__": _binary("mul", arith=True), "__rmul__": _binary("mul", True, arith=True),
    "div": _div, "divide": _div, "true_divide": _binary("truediv"),
    "__truediv__": _binary("truediv"), "__rtruediv__": _binary("truediv", True),
    "floor_divide": _binary("floordiv"), "__floordiv__": _binary("floordiv"),
    "__rfloordiv__": _binary("floordiv", True),
    "remainder": _binary("mod"), "__mod__": _binary("mod"), "__rmod__": _binary("mod", True),
    "lt": _binary("lt"), "less": _binary("lt"), "__lt__": _binary("lt"),
    "le": _binary("le"), "less_equal": _binary("le"), "__le__": _binary("le"),
    "gt": _binary("gt"), "greater": _binary("gt"), "__gt__": _binary("gt"),
    "ge": _binary("ge"), "greater_equal": _binary("ge"), "__ge__": _binary("ge"),
    "eq": _binary("eq"), "__eq__": _binary("eq"), "ne": _binary("ne"),
    "not_equal": _binary("ne"), "__ne__": _binary("ne"),
    "logical_and": lambda a, b: _logic("and", a, b), "__and__": lambda a, b: _logic("and", a, b),
    "logical_or": lambda a, b: _logic("or", a, b), "__or__": lambda a, b: _logic("or", a, b),
    "logical_xor": lambda a, b: _logic("xor", a, b), "__xor__": lambda a, b: _logic("xor", a, b),
    "logical_not": lambda a: _logic("not", a), "__invert__": lambda a: _logic("not", a),
    "bitwise_not": lambda a: _logic("not", a),
    "bitwise_and": lambda a, b: _logic("and", a, b), "__rand__": lambda a, b: _logic("and", b, a),
    "bitwise_or": lambda a, b: _logic("or", a, b), "__ror__": lambda a, b: _logic("or", b, a),
    "bitwise_xor": lambda a, b: _logic("xor", a, b), "__rxor__": lambda a, b: _logic("xor", b, a),
    "bitwise_left_shift": lambda a, b: _bits("shl", a, b),
    "__lshift__": lambda a, b: _bits("shl", a, b), "__rlshift__": lambda a, b: _bits("shl", b, a),
    "bitwise_right_shift": lambda a, b: _bits("shr", a, b),
    "__rshift__": lambda a, b: _bits("shr", a, b), "__rrshift__": lambda a, b: _bits("shr", b, a),
    "square": lambda x: _op("mul", x, x),
    "pow": _pow, "__pow__": _pow, "__rpow__": lambda a, b: _pow(b, a),
    "to": _to,
    "float": lambda x: _to(x, torch.float32), "int": lambda x: _to(x, torch.int32),
    "long": lambda x: _to(x, torch.int64), "bool": lambda x: _to(x, torch.bool),
    "zeros_like": _like(0), "ones_like": _like(1), "full_like": _like(None),
    "new_zeros": _new(0), "new_ones": _new(1), "new_full": _new(None),
    "masked_fill": lambda x, mask, value: _where(mask, value, x),
    "isin": _isin,
    **_COMPOSED,
}
# names that exist as torch functions but not as the tensor method of the same meaning
_FUNCTION_ONLY = {"zeros_like", "ones_like", "full_like", "where", "gelu", "expit", "softplus",
                  "logsigmoid", "silu", "hardtanh", "leaky_relu", "isin"}

# Where each name above is a torch function: torch.*, Tensor methods and
# operators, torch.nn.functional.*, torch.special.*. __torch_function__ looks
# functions up by identity in this table, never by name.
_OWNERS = (torch, torch.Tensor, torch.nn.functional, torch.special)
_OWNER_NAMES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.special")


def _function_table() -> dict[object, Callable[..., Sym]]:
    table: dict[object, Callable[..., Sym]] = {}
    for name, handler in _TORCH_OPS.items():
        for owner in _OWNERS:
            if owner is torch.Tensor and name in _FUNCTION_ONLY:
                continue
            fn = getattr(owner, name, None)
            if fn is not None and callable(fn) and not isinstance(fn, torch.dtype):
                table.setdefault(fn, handler)
    return table


_FUNCTIONS = _function_table()
_TENSOR_GETITEM = torch.Tensor.__getitem__


def describe_function(func: object) -> str:
    """How a user would spell a function in their code: torch.ops.ns.name for
    custom ops, module.qualname otherwise."""
    if isinstance(func, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
        return f"torch.ops.{func._qualified_op_name.replace('::', '.')}" \
            if hasattr(func, "_qualified_op_name") else f"torch.ops.{func}"
    name = getattr(func, "__name__", None)
    for owner, spelled in zip(_OWNERS, _OWNER_NAMES, strict=True):
        if name and getattr(owner, name, None) is func:
            return f"{spelled}.{name}"
    module = getattr(func, "__module__", None) or ""
    qualname = getattr(func, "__qualname__", None) or name or repr(func)
    return f"{module}.{qualname}" if module else qualname


# ---------------------------------------------------------------------------
# Captured tensors: the trace in progress lifts them to aux


_ACTIVE_CAPTURES: list[Captures] = []


def _captured(tensor: torch.Tensor) -> SymAux:
    if not _ACTIVE_CAPTURES:
        raise TraceError("a tensor indexed by a traced value outside a trace")
    ir_dtype(tensor.dtype, "a captured tensor")
    if tensor.dim() == 0:
        raise TraceError("a 0-d captured tensor indexed by a traced value")
    return SymAux(_ACTIVE_CAPTURES[-1].aux_name(tensor), tensor, captured=True)


# ---------------------------------------------------------------------------
# Entry points


@dataclass(frozen=True)
class AuxInfo:
    """An aux tensor a hook reads: how the launcher packs it (name -> slot later)."""

    name: str
    dtype: torch.dtype
    rank: int


@dataclass(frozen=True)
class TracedMod:
    """A traced mod: its expression and the aux tensors it reads (`captured`:
    those of them it captured, as (name, tensor))."""

    node: Node
    aux: tuple[AuxInfo, ...]
    where: str  # file:line of the mod's definition
    captured: tuple[tuple[str, torch.Tensor], ...] = ()


def _mod_location(fn: Callable[..., object]) -> str:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def _aux_kwargs(fn: Callable[..., object], kind: str,
                aux: Mapping[str, torch.Tensor]) -> dict[str, SymAux | Sym]:
    """The keyword-only aux parameters of a mod, as placeholders."""
    where = _mod_location(fn)
    params = inspect.signature(fn).parameters.values()
    # A keyword-only parameter with a default (functools.partial(mod, w=64) makes
    # one) is a constant of the mod unless an aux is named like it (aux_parameters).
    wanted = [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY
              and (p.default is inspect.Parameter.empty or p.name in aux)]
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
        wanted += [n for n in aux if n not in wanted]
    out: dict[str, SymAux | Sym] = {}
    for name in wanted:
        if name not in aux:
            raise TraceError(
                f"{kind} takes aux {name!r}, but make_aux gives only {sorted(aux)}", where=where
            )
        t = aux[name]
        if not isinstance(t, torch.Tensor):
            raise TraceError(f"aux {name!r} is a {type(t).__name__}, not a tensor", where=where)
        ir_dtype(t.dtype, f"{kind} takes aux {name!r}, which", where)
        placeholder = SymAux(name, t)
        out[name] = placeholder[()] if t.dim() == 0 else placeholder  # type: ignore[assignment]
    return out


def _trace(fn: Callable[..., object], kind: str, positional: list[Sym],
           aux: Mapping[str, torch.Tensor], result: DType,
           captures: Captures | None) -> TracedMod:
    where = _mod_location(fn)
    kwargs = _aux_kwargs(fn, kind, aux)
    captures = captures if captures is not None else Captures([fn], taken=aux)
    _ACTIVE_CAPTURES.append(captures)
    try:
        out = fn(*positional, **kwargs)
    except TraceError as e:
        raise TraceError(f"in {kind}: {str(e).removeprefix(e.where + ': ')}", e.where) from None
    except Exception as e:  # the mod itself failed on symbolic values
        loc = traceback.extract_tb(e.__traceback__)[-1]
        raise TraceError(
            f"in {kind}: {type(e).__name__}: {e}", where=f"{loc.filename}:{loc.lineno}"
        ) from e
    finally:
        _ACTIVE_CAPTURES.pop()
    try:
        node = _lift(out)
    except TraceError:
        raise TraceError(f"{kind} returned {type(out).__name__}, not a tensor", where) from None
    if result == DType.BOOL and node.dtype != DType.BOOL:
        raise TraceError(f"{kind} must return a bool mask, got {node.dtype.value}", where)
    node = simplify(expr.cast(node, result))
    used = expr.aux_reads(node)
    every = {**aux, **captures.lifted}
    infos = tuple(AuxInfo(n, every[n].dtype, every[n].dim()) for n in every if n in used)
    captured = tuple((n, t) for n, t in captures.lifted.items() if n in used)
    return TracedMod(node, infos, where, captured)


def trace_mask_mod(fn: Callable[..., object], aux: Mapping[str, torch.Tensor],
                   captures: Captures | None = None) -> TracedMod:
    """Trace `mask_mod(b, h, q_idx, kv_idx, *, <aux>)` into a bool expression;
    pass one `captures` to the traces of a spec's two mods so that a tensor
    both capture gets one aux name."""
    idx = [Sym(expr.var(n)) for n in expr.INDEX_VARS]
    return _trace(fn, "mask_mod", idx, aux, DType.BOOL, captures)


def trace_score_mod(fn: Callable[..., object], aux: Mapping[str, torch.Tensor],
                    captures: Captures | None = None) -> TracedMod:
    """Trace `score_mod(score, b, h, q_idx, kv_idx, *, <aux>)` into a float expression."""
    args = [Sym(expr.var(expr.SCORE_VAR))] + [Sym(expr.var(n)) for n in expr.INDEX_VARS]
    return _trace(fn, "score_mod", args, aux, DType.FLOAT, captures)


