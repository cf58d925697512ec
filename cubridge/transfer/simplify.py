"""Rewrite rules for the hook expression IR, as a table.

Each rule is (op, rewrite): `rewrite(node)` returns a replacement node or
None. `simplify` applies them bottom-up until nothing changes. Constant
folding uses the scalar semantics of `expr.OPS`, which match torch's.
"""

from __future__ import annotations

from collections.abc import Callable

from cubridge.transfer import expr
from cubridge.transfer.expr import DType, Node


def _is_const(n: Node, value: object | None = None) -> bool:
    return n.op == "const" and (value is None or (n.arg == value and type(n.arg) is type(value)))


def _zero(n: Node) -> bool:
    return n.op == "const" and n.dtype in (DType.INT, DType.FLOAT) and n.arg == 0


def _one(n: Node) -> bool:
    return n.op == "const" and n.dtype in (DType.INT, DType.FLOAT) and n.arg == 1


def _fold(n: Node) -> Node | None:
    if not n.args or not all(_is_const(a) for a in n.args):
        return None
    values = [a.arg for a in n.args]
    try:
        if n.op == "cast":
            return expr.const(expr.cast_value(values[0], n.dtype))
        return expr.const(expr.evaluate_const(n.op, n.dtype, values))
    except (ZeroDivisionError, OverflowError, ValueError):
        return None  # leave it for run time, as torch would


def _clamp_collapses(n: Node, inner: str) -> bool:
    """n = min(max(x, lo), hi) with lo >= hi (inner "max"), or max(min(x, hi), lo)
    with lo >= hi (inner "min"): both constant."""
    x, outer = n.args
    if x.op != inner or not _is_const(outer) or not _is_const(x.args[1]):
        return False
    return x.args[1].arg >= outer.arg if inner == "max" else outer.arg >= x.args[1].arg


def _fmod_zero_test(n: Node) -> Node | None:
    """fmod(x, y) == 0 (or != 0) as x % y == 0: the traced integer fmod is
    where(x % y != 0 & <signs differ>, x % y - y, x % y), and x % y - y is never 0
    (|x % y| < |y|), so the C remainder is 0 exactly where the floor modulo is: a
    divisibility test keeps the form the mask analyses know (a key set)."""
    w, zero = n.args
    if not (_zero(zero) and zero.dtype == DType.INT and w.op == "where"
            and w.dtype == DType.INT):
        return None
    cond, fixed, rem = w.args
    if not (rem.op == "mod" and fixed.op == "sub" and fixed.args == (rem, rem.args[1])
            and cond.op == "and" and cond.args[0] == Node("ne", DType.BOOL, (rem, zero))):
        return None
    return Node(n.op, DType.BOOL, (rem, zero))


# the bit forms below go up to 2^30, the largest power of two of the hooks' 32-bit ints
_MAX_SHIFT = 30


def _int_const(n: Node) -> int | None:
    return n.arg if n.op == "const" and n.dtype == DType.INT else None  # type: ignore[return-value]


def _shift_as_quotient(n: Node) -> Node | None:
    """x >> j (a constant 0 <= j <= 30) as x // 2^j: an arithmetic shift is a floor
    division, for negative x too (-5 >> 1 == -3 == -5 // 2). The mask analyses read
    quotients (`(q >> 6) == (k >> 6)`: the query's own 64-key block, a row interval),
    and the CUDA renderer writes a quotient by 2^j back as the shift."""
    j = _int_const(n.args[1])
    if j is None or not 0 <= j <= _MAX_SHIFT:
        return None
    return expr.apply("floordiv", n.args[0], expr.const(2**j))


def _low_bits_as_residue(n: Node) -> Node | None:
    """x & (2^j - 1) (1 <= j <= 30, either operand) as x % 2^j: in two's
    complement the low bits are the floor modulo, for negative x too (-5 & 3 == 3 == -5 %
    4). `(k & 1) == 0` is then a key set like `k % 2 == 0`, and the renderer writes a
    modulo by 2^j back as the mask."""
    for x, m in (n.args, n.args[::-1]):
        low = _int_const(m)
        if low is not None and 0 < low < 2**_MAX_SHIFT and low & (low + 1) == 0:
            return expr.apply("mod", x, expr.const(low + 1))


def _fmod_parts(w: Node) -> tuple[Node, Node, int] | None:
    """(x, x % p, p) where w is the traced integer fmod(x, p) by a positive constant p:
    where(x % p != 0 & x < 0, x % p - p, x % p) (once `(x < 0) != (p < 0)` is x < 0)."""
    if not (w.op == "where" and w.dtype == DType.INT):
        return None
    cond, fixed, rem = w.args
    if not (rem.op == "mod" and _is_const(rem.args[1]) and type(rem.args[1].arg) is int
            and rem.args[1].arg > 0 and fixed.op == "sub" and fixed.args == (rem, rem.args[1])):
        return None
    x, p = rem.args[0], rem.args[1].arg
    negative = Node("lt", DType.BOOL, (x, expr.const(0)))
    if cond != Node("and", DType.BOOL, (Node("ne", DType.BOOL, (rem, expr.const(0))), negative)):
        return None
    return x, rem, p


def _fmod_residue_test(n: Node) -> Node | None:
    """fmod(x, p) == s (or !=) for constants p > 0 and s != 0 as a residue of the floor
    modulo and x's sign: the C remainder is x % p where x >= 0 and x % p - p (or 0)
    where x < 0, so it is s > 0 exactly where x % p == s and x >= 0, s < 0 where x % p
    == p + s and x < 0, and never where |s| >= p. A key set then (`torch.fmod(k - q, 3)
    == 1`: row_interval.py), where the where() had none."""
    a, b = n.args
    if _is_const(a) and not _is_const(b):
        a, b = b, a
    parts = _fmod_parts(a)
    if parts is None or not (_is_const(b) and type(b.arg) is int and b.arg != 0):
        return None
    x, rem, p = parts
    s = b.arg
    if abs(s) >= p:
        return expr.const(n.op == "ne")
    residue = expr.apply("eq", rem, expr.const(s if s > 0 else p + s))
    sign = expr.apply("ge" if s > 0 else "lt", x, expr.const(0))
    if n.op == "eq":
        return expr.apply("and", residue, sign)
    return expr.apply("or", expr.negate(residue), expr.negate(sign))


def _same_bool(n: Node) -> Node | None:
    """b == True and b != False are b (fmod's sign fix-up traces `(x < 0) != (p < 0)`,
    `(x < 0) != False` for a positive constant p)."""
    a, b = n.args
    keep = n.op == "eq"
    if _is_const(a, keep) and b.dtype == DType.BOOL:
        return b
    if _is_const(b, keep) and a.dtype == DType.BOOL:
        return a
    return None


Rule = tuple[str, Callable[[Node], Node | None]]

RULES: list[Rule] = [
    # x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, x // 1 (int)
    ("add", lambda n: n.args[0] if _zero(n.args[1]) else n.args[1] if _zero(n.args[0]) else None),
    ("sub", lambda n: n.args[0] if _zero(n.args[1]) else None),
    ("mul", lambda n: n.args[0] if _one(n.args[1]) else n.args[1] if _one(n.args[0]) else None),
    ("truediv", lambda n: n.args[0] if _one(n.args[1]) else None),
    ("floordiv", lambda n: n.args[0] if n.dtype == DType.INT and _one(n.args[1]) else None),
    # integer x * 0 (floats keep it: inf * 0 is nan)
    ("mul", lambda n: expr.const(0) if n.dtype == DType.INT and (_zero(n.args[0]) or
                                                                   _zero(n.args[1])) else None),
    # boolean identities
    ("and", lambda n: n.args[0] if _is_const(n.args[1], True) else
        n.args[1] if _is_const(n.args[0], True) else None),
    ("and", lambda n: expr.const(False) if _is_const(n.args[0], False) or
        _is_const(n.args[1], False) else None),
    ("or", lambda n: n.args[0] if _is_const(n.args[1], False) else
        n.args[1] if _is_const(n.args[0], False) else None),
    ("or", lambda n: expr.const(True) if _is_const(n.args[0], True) or
        _is_const(n.args[1], True) else None),
    ("not", lambda n: n.args[0].args[0] if n.args[0].op == "not" else None),
    ("neg", lambda n: n.args[0].args[0] if n.args[0].op == "neg" else None),
    # x op x
    ("and", lambda n: n.args[0] if n.args[0] == n.args[1] else None),
    ("or", lambda n: n.args[0] if n.args[0] == n.args[1] else None),
    # an integer clamp to an empty or one-point range: its upper (min) or lower
    # (max) end, whatever x is (clamp(x, 1, 1) in STA masks)
    ("min", lambda n: n.args[1] if n.dtype == DType.INT and _clamp_collapses(n, "max")
        else None),
    ("max", lambda n: n.args[1] if n.dtype == DType.INT and _clamp_collapses(n, "min")
        else None),
    # b == True, b != False
    ("eq", _same_bool),
    ("ne", _same_bool),
    # torch.fmod(x, y) == 0 / != 0 (traced as a floor modulo with a sign fix-up), and
    # fmod(x, p) == s / != s for constants p > 0, s != 0
    ("eq", _fmod_zero_test),
    ("ne", _fmod_zero_test),
    # integer shifts by a constant and masks of low bits as floor quotients and residues
    ("shr", _shift_as_quotient),
    ("bitand", _low_bits_as_residue),
    ("eq", _fmod_residue_test),
    ("ne", _fmod_residue_test),
    # select with a known condition or equal branches
    ("where", lambda n: (n.args[1] if n.args[0].arg else n.args[2]) if _is_const(n.args[0])
        else None),
    ("where", lambda n: n.args[1] if n.args[1] == n.args[2] else None),
]

_RULES_BY_OP: dict[str, list[Callable[[Node], Node | None]]] = {}
for _op, _fn in RULES:
    _RULES_BY_OP.setdefault(_op, []).append(_fn)


def _rewrite_once(n: Node) -> Node:
    folded = _fold(n)
    if folded is not None:
        return folded
    for rule in _RULES_BY_OP.get(n.op, ()):
        out = rule(n)
        if out is not None:
            return out
    return n


def simplify(node: Node) -> Node:
    """Apply the rules bottom-up to a fixed point."""
    memo: dict[Node, Node] = {}

    def go(n: Node) -> Node:
        if n in memo:
            return memo[n]
        args = tuple(go(a) for a in n.args)
        cur = Node(n.op, n.dtype, args, n.arg) if args != n.args else n
        while True:
            nxt = _rewrite_once(cur)
            if nxt is cur:
                break
            cur = go(nxt) if nxt.dtype == cur.dtype else go(expr.cast(nxt, cur.dtype))
        memo[n] = cur
        return cur

    return go(node)
