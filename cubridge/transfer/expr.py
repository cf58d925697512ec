"""The hook expression IR: what a traced mask_mod / score_mod computes.

A hook is a pure scalar function of (score, b, h, q, k) and aux tensor reads.
Tracing (cubridge.transfer.trace) turns a FlexAttention-style mod into one
`Node` tree; simplification, interval classification and the renderers
(CUDA, tile-level torch, interval code) all walk the same tree.

Every node has one of three dtypes (bool, int, float). Tracing inserts
explicit `cast` nodes wherever torch would promote, so an operator's operands
always share a dtype and renderers never reason about promotion.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum


class DType(Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"


# Index variables a hook receives, and the score (score_mod only).
INDEX_VARS = ("b", "h", "q", "k")
SCORE_VAR = "score"


@dataclass(frozen=True)
class Node:
    """One operation. `arg` carries the op's static payload: a constant's value,
    a variable's name, an aux tensor's name (aux_load) or (name, dim) (aux_size)."""

    op: str
    dtype: DType
    args: tuple[Node, ...] = ()
    arg: object = None

    def walk(self) -> Iterator[Node]:
        """Every node of the tree, children before parents (each shared node once)."""
        seen: set[int] = set()

        def visit(n: Node) -> Iterator[Node]:
            if id(n) in seen:
                return
            seen.add(id(n))
            for a in n.args:
                yield from visit(a)
            yield n

        return visit(self)

    def __repr__(self) -> str:
        if self.op == "const":
            return repr(self.arg)
        if self.op == "var":
            return str(self.arg)
        inner = ", ".join(repr(a) for a in self.args)
        extra = f"{self.arg!r}; " if self.arg is not None else ""
        return f"{self.op}[{self.dtype.value}]({extra}{inner})"


def node_to_json(node: Node) -> dict[str, object]:
    """The tree as JSON-able data (`node_from_json` reads it back)."""
    out: dict[str, object] = {"op": node.op, "dtype": node.dtype.value}
    if node.args:
        out["args"] = [node_to_json(a) for a in node.args]
    if node.arg is not None:
        out["arg"] = list(node.arg) if isinstance(node.arg, tuple) else node.arg
    return out


def node_from_json(data: dict[str, object]) -> Node:
    arg = data.get("arg")
    return Node(str(data["op"]), DType(data["dtype"]),
                tuple(node_from_json(a) for a in data.get("args", ())),  # type: ignore[union-attr]
                tuple(arg) if isinstance(arg, list) else arg)


def const(value: bool | int | float) -> Node:
    if isinstance(value, bool):
        return Node("const", DType.BOOL, arg=value)
    if isinstance(value, int):
        return Node("const", DType.INT, arg=value)
    return Node("const", DType.FLOAT, arg=float(value))


def var(name: str) -> Node:
    return Node("var", DType.FLOAT if name == SCORE_VAR else DType.INT, arg=name)


def cast(x: Node, dtype: DType) -> Node:
    return x if x.dtype == dtype else Node("cast", dtype, (x,))


# ---------------------------------------------------------------------------
# Operator table: arity, typing rule and scalar Python semantics (which match
# torch's: floor division and modulo follow the sign rules of Python/torch,
# not C). Typing rules:
#   same    result has the operands' common dtype (bool promoted to int)
#   float   operands cast to float, float result
#   compare operands share a dtype, bool result
#   logic   bool operands, bool result
#   bits    int operands (bools promoted), int result: bitwise ops and shifts


def _floordiv(a: float, b: float) -> float:
    if b == 0:
        raise ZeroDivisionError("floor division by zero")
    return a // b if isinstance(a, int) and isinstance(b, int) else float(math.floor(a / b))


def _mod(a: float, b: float) -> float:
    if b == 0:
        raise ZeroDivisionError("modulo by zero")
    return a % b if isinstance(a, int) and isinstance(b, int) else a - b * math.floor(a / b)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _safe_log(x: float) -> float:
    return -math.inf if x == 0 else (math.log(x) if x > 0 else math.nan)


def _safe_log2(x: float) -> float:
    return -math.inf if x == 0 else (math.log2(x) if x > 0 else math.nan)


def _safe_exp(x: float) -> float:
    return math.inf if x > 709 else math.exp(x)


def _periodic(f: Callable[[float], float]) -> Callable[[float], float]:
    """sin / cos as torch computes them: NaN at +-inf (math's raise there)."""
    return lambda x: f(x) if math.isfinite(x) else math.nan


def _shl(a: int, b: int) -> int:
    if b < 0:
        raise ValueError("negative shift count")
    return a << b


def _shr(a: int, b: int) -> int:
    if b < 0:
        raise ValueError("negative shift count")
    return a >> b


@dataclass(frozen=True)
class OpInfo:
    arity: int
    typing: str
    py: Callable[..., object]


OPS: dict[str, OpInfo] = {
    # unary
    "neg": OpInfo(1, "same", lambda a: -a),
    "abs": OpInfo(1, "same", abs),
    "not": OpInfo(1, "logic", lambda a: not a),
    "tanh": OpInfo(1, "float", math.tanh),
    "exp": OpInfo(1, "float", _safe_exp),
    "exp2": OpInfo(1, "float", lambda a: math.inf if a > 1023 else 2.0**a),
    "log": OpInfo(1, "float", _safe_log),
    "log2": OpInfo(1, "float", _safe_log2),
    "sigmoid": OpInfo(1, "float", _sigmoid),
    "sqrt": OpInfo(1, "float", lambda a: math.sqrt(a) if a >= 0 else math.nan),
    "floor": OpInfo(1, "float", lambda a: float(math.floor(a))),
    "ceil": OpInfo(1, "float", lambda a: float(math.ceil(a))),
    "erf": OpInfo(1, "float", math.erf),
    "sin": OpInfo(1, "float", _periodic(math.sin)),
    "cos": OpInfo(1, "float", _periodic(math.cos)),
    # binary arithmetic
    "add": OpInfo(2, "same", lambda a, b: a + b),
    "sub": OpInfo(2, "same", lambda a, b: a - b),
    "mul": OpInfo(2, "same", lambda a, b: a * b),
    "truediv": OpInfo(2, "float", lambda a, b: a / b if b else math.copysign(math.inf, a)),
    "floordiv": OpInfo(2, "same", _floordiv),
    "mod": OpInfo(2, "same", _mod),
    "min": OpInfo(2, "same", min),
    "max": OpInfo(2, "same", max),
    # comparisons
    "lt": OpInfo(2, "compare", lambda a, b: a < b),
    "le": OpInfo(2, "compare", lambda a, b: a <= b),
    "gt": OpInfo(2, "compare", lambda a, b: a > b),
    "ge": OpInfo(2, "compare", lambda a, b: a >= b),
    "eq": OpInfo(2, "compare", lambda a, b: a == b),
    "ne": OpInfo(2, "compare", lambda a, b: a != b),
    # logic
    "and": OpInfo(2, "logic", lambda a, b: a and b),
    "or": OpInfo(2, "logic", lambda a, b: a or b),
    "xor": OpInfo(2, "logic", lambda a, b: a != b),
    # integer bit operations (two's complement, arithmetic right shift, as torch)
    "bitand": OpInfo(2, "bits", lambda a, b: a & b),
    "bitor": OpInfo(2, "bits", lambda a, b: a | b),
    "bitxor": OpInfo(2, "bits", lambda a, b: a ^ b),
    "bitnot": OpInfo(1, "bits", lambda a: ~a),
    "shl": OpInfo(2, "bits", _shl),
    "shr": OpInfo(2, "bits", _shr),
    # select
    "where": OpInfo(3, "where", lambda c, a, b: a if c else b),
}

BIT_OPS = frozenset({"bitand", "bitor", "bitxor", "bitnot", "shl", "shr"})


def _common(a: DType, b: DType) -> DType:
    if DType.FLOAT in (a, b):
        return DType.FLOAT
    return DType.INT


def apply(op: str, *args: Node) -> Node:
    """Build `op(args)` with torch's typing, inserting casts on the operands."""
    info = OPS[op]
    if len(args) != info.arity:
        raise ValueError(f"{op} takes {info.arity} operands, got {len(args)}")
    if info.typing == "logic":
        return Node(op, DType.BOOL, tuple(cast(a, DType.BOOL) for a in args))
    if info.typing == "float":
        return Node(op, DType.FLOAT, tuple(cast(a, DType.FLOAT) for a in args))
    if info.typing == "bits":
        if any(a.dtype == DType.FLOAT for a in args):
            raise ValueError(f"{op} takes integer operands, not float")
        return Node(op, DType.INT, tuple(cast(a, DType.INT) for a in args))
    if info.typing == "where":
        cond, a, b = args
        t = a.dtype if a.dtype == b.dtype else _common(a.dtype, b.dtype)
        return Node(op, t, (cast(cond, DType.BOOL), cast(a, t), cast(b, t)))
    if info.typing == "compare":
        a, b = args
        t = a.dtype if a.dtype == b.dtype else _common(a.dtype, b.dtype)
        return Node(op, DType.BOOL, (cast(a, t), cast(b, t)))
    # "same": bools do arithmetic as ints, as torch does with an int operand
    t = args[0].dtype
    for a in args[1:]:
        t = t if a.dtype == t else _common(t, a.dtype)
    if t == DType.BOOL:
        t = DType.INT
    return Node(op, t, tuple(cast(a, t) for a in args))


def evaluate_const(op: str, dtype: DType, values: list[object]) -> bool | int | float:
    """Scalar semantics of `op` on constants, with the result in `dtype`."""
    out = OPS[op].py(*values)
    if dtype == DType.BOOL:
        return bool(out)
    if dtype == DType.INT:
        return int(out)
    return float(out)


def cast_value(value: object, dtype: DType) -> bool | int | float:
    """A constant converted as torch's .to() would (float -> int truncates)."""
    if dtype == DType.BOOL:
        return bool(value)
    if dtype == DType.INT:
        return math.trunc(value)  # type: ignore[arg-type]
    return float(value)  # type: ignore[arg-type]


# not (a OP b) is (a NOT_OP b) for integers
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def negate(c: Node) -> Node:
    """not c: an integer comparison flipped (`q < k` -> `q >= k`, a form the mask
    analyses read), anything else wrapped in `not` (floats too: NaN compares false)."""
    if c.op in _NEGATED and all(a.dtype == DType.INT for a in c.args):
        return apply(_NEGATED[c.op], *c.args)
    return apply("not", c)


def free_vars(node: Node) -> set[str]:
    return {n.arg for n in node.walk() if n.op == "var"}  # type: ignore[misc]


def substitute(node: Node, replacements: Mapping[Node, Node]) -> Node:
    """`node` with every subtree equal to a key of `replacements` replaced."""
    if node in replacements:
        return replacements[node]
    if not node.args:
        return node
    return Node(node.op, node.dtype, tuple(substitute(a, replacements) for a in node.args),
                node.arg)


def aux_reads(node: Node) -> dict[str, int]:
    """Aux tensors the expression reads (aux_load or aux_size), name -> rank of load."""
    out: dict[str, int] = {}
    for n in node.walk():
        if n.op == "aux_load":
            out[n.arg] = len(n.args)  # type: ignore[index]
        elif n.op == "aux_size":
            out.setdefault(n.arg[0], -1)  # type: ignore[index]
    return out


def shared_subexpressions(root: Node, leaves: Collection[Node] = ()) -> list[Node]:
    """Non-trivial subexpressions that occur more than once in `root`, children
    before parents: renderers bind each to a temporary so generated code stays
    readable (and computes each once). `leaves` are not looked into (values
    the renderer already has)."""
    count: Counter[Node] = Counter()
    order: list[Node] = []

    def visit(n: Node) -> None:
        count[n] += 1
        if count[n] > 1 or n in leaves:
            return
        for a in n.args:
            visit(a)
        order.append(n)

    visit(root)
    return [n for n in order if count[n] > 1 and n.args and n is not root]
