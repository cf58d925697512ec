"""Row intervals of index-only masks. A mask_mod that is a conjunction of
comparisons, each linear in the key with coefficient +-1 and otherwise free of it
(q >= k, q - k < W, k < G, k >= q - W + 1, ...), allows each query row one
interval of keys [lo(b, h, q), hi(b, h, q)]; a disjunction of such conjunctions
(a window plus global keys: `q >= k & (q - k < W | k < G)`) allows the union of
their intervals, and a choice free of the key (`torch.where(h % 2 == 1, q - k < 512,
q - k < 128)`) the interval it chooses; negations are pushed in, a choice by the
key is the union `(c & a) | (~c & b)`, and integers `x != y` are its two sides
`x < y | x > y`. Past MAX_INTERVALS, conjunctions whose row conditions exclude each
other become such a choice, and a conjunction free of the key (rows that see every
key: Longformer's global tokens, `|q - k| <= W | q < G | k < G`) a choice inside each
of the others. A kernel may then set a row's mask bits as a few ranges, a few
operations per row instead of a mask_mod per pair (row_interval, docs/hooks.md).
Bounds may read aux at key-free indices (a 0-d prefix length, a per-row table).
Reads that depend on the key, any other key arithmetic and unions of more than
MAX_INTERVALS intervals have no such form; mask_mod stays for them.

Floor quotients of the key bound it like the key itself (`q // 64 == k // 64`: k in
[64 (q // 64), 64 (q // 64) + 63]). With `periods=True` an interval may also keep only
the keys of one residue modulo a constant period below 2^15 (`(q - k) % 128 == 0`,
`(k - q + 3) % 4 == 1`, `(q - k) % 3 == 0`), or of one range of residues modulo a power of
two (`k % 128 >= 112`, `k % 4 != 3`): a key set, whose bits a kernel sets as a constant
comb shifted into place (key sets, docs/hooks.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.attention import Shape
from cubridge.ir.hooks import BlockKind
from cubridge.lower.cuda_render import render_value
from cubridge.transfer import interval
from cubridge.transfer.expr import DType, Node, apply, const, free_vars, negate
from cubridge.transfer.simplify import simplify
from cubridge.transfer.torch_render import grid_function

KEY = "k"
# Bounds where a row has none on that side (keys are far inside these).
NO_LOWER = -(1 << 30)
NO_UPPER = 1 << 30
# Each interval costs a kernel about a dozen operations per row; past a few, a
# mask_mod per pair is as cheap.
MAX_INTERVALS = 2


@dataclass(frozen=True)
class RowInterval:
    lower: tuple[Node, ...]  # key >= each (key-free int expressions)
    upper: tuple[Node, ...]  # key <= each
    guards: tuple[Node, ...]  # key-free conditions a row needs to allow any key
    period: int = 1  # only keys == phase + t (mod period), 0 <= t < width
    phase: Node | None = None  # key-free (None where period is 1)
    width: int = 1  # residues kept a period, from phase on (1 unless period is a power of 2)


def _linear(n: Node) -> tuple[int, Node | None] | None:
    """(c, r) with n == c * key + r, r key-free (None: 0); None where n is not
    linear in the key."""
    if n.dtype != DType.INT:
        return None
    if KEY not in free_vars(n):
        return 0, n
    if n.op == "var":
        return 1, None
    if n.op in ("add", "sub"):
        a, b = _linear(n.args[0]), _linear(n.args[1])
        if a is None or b is None:
            return None
        sign = 1 if n.op == "add" else -1
        return a[0] + sign * b[0], _combine(a[1], b[1], sign)
    if n.op == "neg":
        a = _linear(n.args[0])
        return None if a is None else (-a[0], None if a[1] is None else apply("neg", a[1]))
    if n.op == "mul":
        x, y = n.args
        if y.op == "const" and KEY in free_vars(x):
            x, y = y, x
        if x.op == "const" and isinstance(x.arg, int) and not isinstance(x.arg, bool):
            a = _linear(y)
            if a is None:
                return None
            return x.arg * a[0], None if a[1] is None else apply("mul", x, a[1])
    return None


def _combine(a: Node | None, b: Node | None, sign: int) -> Node | None:
    if b is None:
        return a
    if a is None:
        return b if sign > 0 else apply("neg", b)
    return apply("add" if sign > 0 else "sub", a, b)


def _negated(n: Node) -> Node | None:
    """`not n` with the negation pushed one level in (De Morgan, an integer
    comparison flipped), or None where it does not go in."""
    if n.op == "not":
        return n.args[0]
    if n.op in ("and", "bitand", "or", "bitor") and n.dtype == DType.BOOL:
        op = "or" if n.op in ("and", "bitand") else "and"
        return apply(op, apply("not", n.args[0]), apply("not", n.args[1]))
    flipped = negate(n)
    return None if flipped.op == "not" else flipped


def _disjuncts(n: Node) -> list[list[Node]] | None:
    """A bool expression in disjunctive normal form: the conjunctions whose union
    it is, each a list of atoms (None past MAX_INTERVALS conjunctions)."""
    if n.dtype == DType.BOOL and n.op == "not" and KEY in free_vars(n):
        inner = _negated(n.args[0])  # ~(k > q | q - k >= W): the window it leaves
        if inner is not None:
            return _disjuncts(inner)
    if n.dtype == DType.BOOL and n.op == "where" and KEY in free_vars(n.args[0]):
        # a choice by the key, `where(k < S, k <= q, q - k < W)`: (c & a) | (~c & b)
        c, a, b = n.args
        return _disjuncts(apply("or", apply("and", c, a), apply("and", apply("not", c), b)))
    if n.dtype == DType.BOOL and n.op in ("and", "bitand", "or", "bitor"):
        left, right = _disjuncts(n.args[0]), _disjuncts(n.args[1])
        if left is None or right is None:
            return None
        if n.op in ("or", "bitor"):
            terms = _whole_rows(_choices(left + right))
        else:
            terms = _choices([a + b for a in left for b in right])
            if len(terms) > MAX_INTERVALS:  # (A | g) & (B | C): fold g before distributing
                left, right = _whole_rows(left, 1), _whole_rows(right, 1)
                terms = _choices([a + b for a in left for b in right])
        return terms if len(terms) <= MAX_INTERVALS else None
    if n.dtype == DType.BOOL and KEY in free_vars(n):
        bounded = _abs_compared(n)  # |q - k| <= W: q - k <= W & q - k >= -W
        if bounded is not None:
            return _disjuncts(bounded)
        sides = _unequal_sides(n)  # q // 64 != k // 64: q // 64 < k // 64 | q // 64 > k // 64
        if sides is not None:
            return _disjuncts(sides)
    # (a key-free choice between two conjunctions, `where(h % 2 == 1, A, B)`, is one
    # atom: _interval takes the bounds the choice selects)
    return [[n]]


def _choices(terms: list[list[Node]]) -> list[list[Node]]:
    """Past MAX_INTERVALS conjunctions, two whose key-free conditions exclude each
    other (`g & A` and `~g & B`: no row has both) are one choice `where(g, A, B)`: a
    causal prompt then frames (`q < t & k <= q | q >= t & k < t | q >= t & ...`)."""
    while len(terms) > MAX_INTERVALS:
        pair = next(((i, j, g) for i, a in enumerate(terms) for j, b in enumerate(terms)
                     if i != j for g in a if KEY not in free_vars(g)
                     and g.dtype == DType.BOOL and _excludes(g, b)), None)
        if pair is None:
            return terms
        i, j, g = pair
        a = [x for x in terms[i] if x is not g]
        b = [x for x in terms[j] if not _complement(g, x)]
        choice = apply("where", g, _conjunction(a), _conjunction(b))
        terms = [t for m, t in enumerate(terms) if m not in (i, j)] + [[choice]]
    return terms


def _whole_rows(terms: list[list[Node]], limit: int = MAX_INTERVALS) -> list[list[Node]]:
    """Past `limit` conjunctions, one free of the key (`q < G`: rows that see every key)
    is a choice inside each of the others, `where(g, True, B)`: a row where g holds has
    the whole row, the others B. Longformer's window and global tokens (`|q - k| <= W |
    q < G | k < G`) are then two intervals a row."""
    while len(terms) > limit:
        g = next((t for t in terms if not any(KEY in free_vars(x) for x in t)), None)
        if g is None:
            return terms
        whole = _conjunction(g)
        terms = [[apply("where", whole, const(True), _conjunction(t))]
                 for t in terms if t is not g]
    return terms


def _complement(g: Node, x: Node) -> bool:
    """Whether x is not g (`~(q < t)` or `q >= t`)."""
    return any(a == b for a, b in ((x, apply("not", g)), (g, apply("not", x)),
                                   (x, negate(g)), (g, negate(x))))


def _excludes(g: Node, atoms: list[Node]) -> bool:
    return any(_complement(g, x) for x in atoms)


def _conjunction(atoms: list[Node]) -> Node:
    out = atoms[0] if atoms else const(True)
    for x in atoms[1:]:
        out = apply("and", out, x)
    return out


def _abs_compared(n: Node) -> Node | None:
    """An order between |x| (an integer) and a key-free y, without the abs: |x| <= y is
    x <= y & x >= -y (empty for y < 0), |x| >= y is x >= y | x <= -y (every x for
    y <= 0); lt and gt alike. None for other atoms."""
    if n.op not in _FLIPPED or n.op == "eq":
        return None
    op, (a, y) = n.op, n.args
    if a.op != "abs":
        op, a, y = _FLIPPED[op], y, a
    if a.op != "abs" or a.dtype != DType.INT or y.dtype != DType.INT or KEY in free_vars(y):
        return None
    x, neg_y = a.args[0], simplify(apply("neg", y))
    if op in ("le", "lt"):
        return apply("and", apply(op, x, y), apply(_FLIPPED[op], x, neg_y))
    return apply("or", apply(op, x, y), apply(_FLIPPED[op], x, neg_y))


def _unequal_sides(n: Node) -> Node | None:
    """Integers x != y as its two sides, x < y | x > y: each may bound the key. None for
    other atoms, and for a residue's `!=`, which is one key set already (the residues
    but one: `k % 4 != 3`)."""
    if n.op != "ne" or any(a.dtype != DType.INT for a in n.args) or _residue(n) is not None:
        return None
    return apply("or", apply("lt", *n.args), apply("gt", *n.args))


# key OP x, for `c * key + r OP 0` with c = +1 (x = -r) and c = -1 (x = r):
# (which side the bound is on, the offset added to x)
_PLUS = {"lt": ("upper", -1), "le": ("upper", 0), "gt": ("lower", 1), "ge": ("lower", 0)}
_MINUS = {"lt": ("lower", 1), "le": ("lower", 0), "gt": ("upper", -1), "ge": ("upper", 0)}


def row_intervals(mask: Node | None, periods: bool = False
                  ) -> tuple[RowInterval, ...] | None:
    """The per-row key intervals of an index-only mask (each row allows their
    union), or None. periods: intervals may keep one residue modulo a constant (or a
    range of residues modulo a power of two)."""
    if mask is None or mask.dtype != DType.BOOL or reads_per_key(mask):
        return None
    terms = _disjuncts(mask)
    if terms is None:
        return None
    intervals = tuple(_interval(atoms) for atoms in terms)
    if any(iv is None for iv in intervals):
        return None
    if not periods and any(iv.period > 1 for iv in intervals):  # type: ignore[union-attr]
        return None
    return intervals  # type: ignore[return-value]


def every_row_keeps_a_key(mask: Node, shape: Shape | None = None) -> bool:
    """Whether every query row of `shape` allows at least one key in [0, Sk), from
    the mask's row intervals evaluated at each row (and batch and head, where they
    read them); shape None: of every problem, from the mask at key 0 on intervals of
    every batch, head and row (causal masks keep key 0). False where that is not
    proved: no row intervals, intervals of one residue, reads of aux (their values
    are the call's)."""
    if any(m.op in ("aux_load", "aux_size") for m in mask.walk()):
        return False
    if shape is None:
        every = interval.span(0, 2**30)
        at_key_zero = interval.compile_mask(mask)(every, every, every, interval.point(0), {})
        return interval.kind(at_key_zero) is BlockKind.FULL
    intervals = row_intervals(mask)
    if not intervals:
        return False
    grid = (torch.arange(shape.b).view(-1, 1, 1), torch.arange(shape.hq).view(1, -1, 1),
            torch.arange(shape.sq).view(1, 1, -1), torch.zeros((), dtype=torch.int64))

    def value(n: Node) -> torch.Tensor:
        return torch.as_tensor(grid_function(n)(*grid))

    keeps = torch.zeros((), dtype=torch.bool)
    for iv in intervals:
        lo, hi = torch.tensor(0), torch.tensor(shape.sk - 1)
        for n in iv.lower:
            lo = torch.maximum(lo, value(n))
        for n in iv.upper:
            hi = torch.minimum(hi, value(n))
        row = lo <= hi
        for n in iv.guards:
            row = row & value(n)
        keeps = keeps | row
    return bool(keeps.all())


def reads_per_key(mask: Node) -> bool:
    """Whether the mask reads aux at an index that depends on the key (a row's
    bounds may read aux at key-free indices, a 0-d prefix length or a per-row
    table, and aux sizes)."""
    return any(n.op == "aux_load" and KEY in free_vars(n) for n in mask.walk())


def _interval(atoms: list[Node]) -> RowInterval | None:
    """The interval a conjunction of atoms allows, or None."""
    lower: list[Node] = []
    upper: list[Node] = []
    guards: list[Node] = []
    period, phase, width = 1, None, 1
    for atom in atoms:
        if KEY not in free_vars(atom):
            if not (atom.op == "const" and atom.arg is True):
                guards.append(atom)
            continue
        if atom.op == "where" and KEY not in free_vars(atom.args[0]):  # (see _disjuncts)
            chosen = _chosen(atom)
            if chosen is None or (chosen[3] > 1 and period > 1):
                return None
            lo, hi, guard, p, ph, w = chosen
            lower.append(lo)
            upper.append(hi)
            if guard is not None:
                guards.append(guard)
            if p > 1:
                period, phase, width = p, ph, w
            continue
        residue = _residue(atom)
        if residue is not None:
            p, ph, w, guard = residue
            if p > 1 and period > 1:  # (two residues: one kernel comb each, not kept)
                return None
            if p > 1:
                period, phase, width = p, ph, w
            if guard is not None:
                guards.append(guard)
            continue
        if atom.op not in ("lt", "le", "gt", "ge", "eq"):
            return None
        floor_bounds = _floor_bounds(atom)
        if floor_bounds is not None:
            for side, bound in floor_bounds:
                (lower if side == "lower" else upper).append(bound)
            continue
        x, y = (_linear(a) for a in atom.args)
        if x is None or y is None:
            return None
        c, r = x[0] - y[0], _combine(x[1], y[1], -1)
        if c not in (1, -1):
            return None
        r = const(0) if r is None else r
        bound = apply("neg", r) if c == 1 else r  # key OP bound
        if atom.op == "eq":
            lower.append(bound)
            upper.append(bound)
            continue
        side, offset = (_PLUS if c == 1 else _MINUS)[atom.op]
        if offset:
            bound = apply("add", bound, const(offset))
        (lower if side == "lower" else upper).append(bound)
    return RowInterval(tuple(map(_tidy, lower)), tuple(map(_tidy, upper)), tuple(guards), period,
                       phase, width)


def _offset(n: Node) -> tuple[Node | None, int]:
    """(base, c) with integer n == base + c (base None: n is the constant c)."""
    c = _int_const(n)
    if c is not None:
        return None, c
    if n.op == "neg" and _int_const(n.args[0]) is not None:
        return None, -_int_const(n.args[0])  # type: ignore[operator]
    if n.op in ("add", "sub") and n.dtype == DType.INT:
        right = _int_const(n.args[1])
        if right is not None:
            base, c = _offset(n.args[0])
            return base, c + (right if n.op == "add" else -right)
        left = _int_const(n.args[0])
        if left is not None and n.op == "add":
            base, c = _offset(n.args[1])
            return base, c + left
    return n, 0


def _tidy(n: Node) -> Node:
    """A bound as it reads best: simplified, its constants folded into one offset of
    one sign (`q - (-512) + (-1)` is `q + 511`); the same value."""
    return _one_offset(simplify(n)) if n.dtype == DType.INT else n


def _one_offset(n: Node) -> Node:
    if n.dtype != DType.INT:
        return n
    args = tuple(_one_offset(a) for a in n.args)
    if args != n.args:
        n = Node(n.op, n.dtype, args, n.arg)
    base, c = _offset(n)
    if base is None:
        return const(c)
    return base if c == 0 else apply("add" if c > 0 else "sub", base, const(abs(c)))


_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def _int_const(n: Node) -> int | None:
    if n.op == "const" and isinstance(n.arg, int) and not isinstance(n.arg, bool):
        return n.arg
    return None


# Periods of a key set that are not powers of two stay below this: a kernel multiplies
# two residues (key_bits.cuh's odd_period_bits), in 32 bits.
MAX_ODD_PERIOD = 1 << 15


def _residue(atom: Node) -> tuple[int, Node | None, int, Node | None] | None:
    """(period, phase, width, guard) of `(c * key + r) % P OP s` (c = +-1, P a constant,
    r key-free; OP ==, s key-free, or, P a power of two, an order or != against a
    constant s): keys == phase + t (mod P) for 0 <= t < width, where the guard
    (0 <= s < P for a key-free s) holds. Period 1: the atom holds for every key."""
    if atom.op not in _FLIPPED and atom.op != "ne":
        return None
    op, (x, s) = atom.op, atom.args
    if KEY not in free_vars(x):
        op, x, s = _FLIPPED.get(op, op), s, x
    if x.op != "mod" or KEY in free_vars(s) or s.dtype != DType.INT:
        return None
    dividend, divisor = x.args
    p = _int_const(divisor)
    power_of_two = p is not None and 2 <= p < 2**30 and p & (p - 1) == 0
    if p is None or not (power_of_two or op == "eq" and 2 <= p < MAX_ODD_PERIOD):
        return None  # (ranges of residues of other periods: no kernel sets their bits)
    lin = _linear(dividend)
    if lin is None or lin[0] not in (1, -1):
        return None
    c, r = lin
    guard = None
    sc = _int_const(s)
    if op == "eq":
        if sc is not None and not 0 <= sc < p:  # (a floor modulo is never that)
            return None
        if sc is None:
            guard = apply("and", apply("ge", s, const(0)), apply("lt", s, const(p)))
        lo = hi = s
        width = 1
    elif op == "ne":
        if sc is None:
            return None
        if not 0 <= sc < p:
            return 1, None, 1, None  # (a floor modulo is never that: every key)
        # the P - 1 residues from s + 1 on, around to s - 1
        lo_c = (sc + 1) % p
        lo, hi, width = const(lo_c), const(lo_c + p - 2), p - 1
    else:
        if sc is None:
            return None
        lo_c, hi_c = {"lt": (0, sc - 1), "le": (0, sc), "gt": (sc + 1, p - 1),
                      "ge": (sc, p - 1)}[op]
        lo_c, hi_c = max(lo_c, 0), min(hi_c, p - 1)
        if lo_c > hi_c:
            return None  # (never: mask_mod keeps it)
        if lo_c == 0 and hi_c == p - 1:
            return 1, None, 1, None
        lo, hi, width = const(lo_c), const(hi_c), hi_c - lo_c + 1
    # c key + r in [lo, hi] (mod P): key == lo - r + t for c = 1, r - hi + t for c = -1
    if c == 1:
        phase = lo if r is None else apply("sub", lo, r)
    else:
        phase = apply("neg", hi) if r is None else apply("sub", r, hi)
    return p, simplify(phase), width, guard


def _floor_bounds(atom: Node) -> list[tuple[str, Node]] | None:
    """The key bounds of `(c * key + r) // P OP m` (c = +-1, P a positive constant, m
    key-free): a floor quotient's bounds are bounds on its dividend (x // P <= m: x <=
    P m + P - 1; x // P >= m: x >= P m)."""
    op, (x, m) = atom.op, atom.args
    if KEY not in free_vars(x):
        op, x, m = _FLIPPED[op], m, x
    if x.op != "floordiv" or KEY in free_vars(m) or m.dtype != DType.INT:
        return None
    p = _int_const(x.args[1])
    lin = _linear(x.args[0])
    if p is None or p <= 0 or lin is None or lin[0] not in (1, -1):
        return None
    c, r = lin
    pm = apply("mul", const(p), m)
    on_x = {"le": [("upper", p - 1)], "lt": [("upper", -1)], "ge": [("lower", 0)],
            "gt": [("lower", p)], "eq": [("lower", 0), ("upper", p - 1)]}[op]
    out = []
    for side, offset in on_x:
        xb = apply("add", pm, const(offset)) if offset else pm  # x OP xb
        if c == 1:  # key OP xb - r
            out.append((side, simplify(xb if r is None else apply("sub", xb, r))))
        else:  # -key + r OP xb: key (flipped) r - xb
            flipped = "lower" if side == "upper" else "upper"
            out.append((flipped, simplify(apply("neg", xb) if r is None else
                                          apply("sub", r, xb))))
    return out


def _chosen(atom: Node) -> tuple[Node, Node, Node | None, int, Node | None, int] | None:
    """Bounds, guard, period, phase and width of `where(c, a, b)`, c key-free and a, b
    one interval each of the same period and width: each is c's choice of the two
    sides'."""
    c, a, b = atom.args
    sides = [_interval(terms[0]) for terms in (_disjuncts(a), _disjuncts(b))
             if terms is not None and len(terms) == 1]
    if len(sides) != 2 or None in sides:
        return None
    ia, ib = sides
    if (ia.period, ia.width) != (ib.period, ib.width):  # (no constant comb at run time)
        return None

    def folded(bounds: tuple[Node, ...], op: str, empty: int) -> Node:
        out = bounds[0] if bounds else const(empty)
        for x in bounds[1:]:
            out = apply(op, out, x)
        return out

    def guard(iv: RowInterval) -> Node:
        return folded(iv.guards, "and", True)  # type: ignore[arg-type]

    def choose(x: Node, y: Node) -> Node:
        return x if x == y else apply("where", c, x, y)

    lo = choose(folded(ia.lower, "max", NO_LOWER), folded(ib.lower, "max", NO_LOWER))
    hi = choose(folded(ia.upper, "min", NO_UPPER), folded(ib.upper, "min", NO_UPPER))
    g = choose(guard(ia), guard(ib)) if ia.guards or ib.guards else None
    phase = choose(ia.phase, ib.phase) if ia.period > 1 else None  # type: ignore[arg-type]
    return lo, hi, g, ia.period, phase, ia.width


def _fold(bounds: tuple[Node, ...], fn: str, empty: int, slots: Mapping[str, int],
          aux_dtypes: Mapping[str, torch.dtype]) -> str:
    if not bounds:
        return str(empty)
    # (integer aux reads render as int, as in mask_mod)
    text = render_value(bounds[0], slots, aux_dtypes)
    for b in bounds[1:]:
        text = f"detail::{fn}({text}, {render_value(b, slots, aux_dtypes)})"
    return text


ROW_INTERVAL_COMMENT = """\
// Each query row's allowed keys, as the union of kRowIntervals intervals [lo, hi]
// (inclusive; 0: the mask has no such form): a kernel may set a row's mask bits as
// that many ranges (docs/hooks.md).
#define CUBRIDGE_HOOKS_ROW_INTERVALS 1  // (kRowIntervals and row_interval are defined)"""


def render_row_interval(mask: Node | None, slots: Mapping[str, int],
                        aux_dtypes: Mapping[str, torch.dtype]) -> str:
    """kRowIntervals and row_interval of a generated header (a stub where the mask
    has no row intervals)."""
    return "\n".join([ROW_INTERVAL_COMMENT, render_intervals(
        "kRowIntervals", "row_interval", row_intervals(mask) or (), slots, aux_dtypes)])


def render_intervals(count: str, function: str, intervals: tuple[RowInterval, ...],
                     slots: Mapping[str, int], aux_dtypes: Mapping[str, torch.dtype]) -> str:
    """`constexpr int <count>` and `KeyInterval <function>(i, b, h, q, aux)`: the i-th
    of a row's intervals."""
    head = (f"CUBRIDGE_HD cubridge::KeyInterval {function}(int i, int b, int h, int q, "
            "const AuxArgs& aux) {")
    lines = [f"constexpr int {count} = {len(intervals)};", head,
             "  (void)i; (void)b; (void)h; (void)q; (void)aux;"]
    lines += ["  " + line for line in interval_returns(
        intervals, "KeyInterval", lambda lo, hi, iv: f"{lo}, {hi}", slots, aux_dtypes)]
    lines += ["}", ""]
    return "\n".join(lines)


def interval_returns(intervals: tuple[RowInterval, ...], struct: str, fields,
                     slots: Mapping[str, int], aux_dtypes: Mapping[str, torch.dtype]
                     ) -> list[str]:
    """The statements returning `cubridge::<struct>{fields(lo, hi, interval)}` for the
    i-th interval (an empty one, lo > hi, where there is none)."""
    lines: list[str] = []
    for i, iv in enumerate(intervals):
        body = []
        for g in iv.guards:
            body.append(f"if (!({render_value(g, slots, aux_dtypes)})) "
                        f"return cubridge::{struct}{{{fields('0', '-1', iv)}}};")
        lo = _fold(iv.lower, "max", NO_LOWER, slots, aux_dtypes)
        hi = _fold(iv.upper, "min", NO_UPPER, slots, aux_dtypes)
        body.append(f"return cubridge::{struct}{{{fields(lo, hi, iv)}}};")
        if i + 1 < len(intervals):
            lines.append(f"if (i == {i}) {{")
            lines += [f"  {line}" for line in body]
            lines.append("}")
        else:
            lines += body
    if not intervals:
        lines.append(f"return cubridge::{struct}{{{fields('0', '-1', None)}}};")
    return lines
