"""Row intervals of index-only masks. A mask_mod that is a conjunction of
comparisons, each linear in the key with coefficient +-1 and otherwise free of it
(q >= k, q - k < W, k < G, k >= q - W + 1, ...), allows each query row one
interval of keys [lo(b, h, q), hi(b, h, q)]. A kernel may then set a row's mask
bits as one range, a few operations per row instead of a mask_mod per pair
(row_interval, docs/hooks.md). Disjunctions (a window plus global keys),
aux reads and any other key arithmetic have no such form; mask_mod stays for them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.cuda_render import render_value
from cubridge.transfer.expr import DType, Node, apply, aux_reads, const, free_vars

KEY = "k"
# Bounds where a row has none on that side (keys are far inside these).
NO_LOWER = -(1 << 30)
NO_UPPER = 1 << 30


@dataclass(frozen=True)
class RowInterval:
    lower: tuple[Node, ...]  # key >= each (key-free int expressions)
    upper: tuple[Node, ...]  # key <= each
    guards: tuple[Node, ...]  # key-free conditions a row needs to allow any key


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


def _atoms(n: Node) -> list[Node] | None:
    """The conjuncts of a bool expression (None where it is not a conjunction)."""
    if n.op in ("and", "bitand") and n.dtype == DType.BOOL:
        left, right = _atoms(n.args[0]), _atoms(n.args[1])
        return None if left is None or right is None else left + right
    return [n]


# key OP x, for `c * key + r OP 0` with c = +1 (x = -r) and c = -1 (x = r):
# (which side the bound is on, the offset added to x)
_PLUS = {"lt": ("upper", -1), "le": ("upper", 0), "gt": ("lower", 1), "ge": ("lower", 0)}
_MINUS = {"lt": ("lower", 1), "le": ("lower", 0), "gt": ("upper", -1), "ge": ("upper", 0)}


def row_interval(mask: Node | None) -> RowInterval | None:
    """The per-row key interval of an index-only mask, or None."""
    if mask is None or mask.dtype != DType.BOOL or aux_reads(mask):
        return None
    atoms = _atoms(mask)
    if atoms is None:
        return None
    lower: list[Node] = []
    upper: list[Node] = []
    guards: list[Node] = []
    for atom in atoms:
        if KEY not in free_vars(atom):
            if not (atom.op == "const" and atom.arg is True):
                guards.append(atom)
            continue
        if atom.op not in ("lt", "le", "gt", "ge", "eq"):
            return None
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
    return RowInterval(tuple(lower), tuple(upper), tuple(guards))


def _fold(bounds: tuple[Node, ...], fn: str, empty: int, slots: Mapping[str, int],
          aux_dtypes: Mapping[str, torch.dtype]) -> str:
    if not bounds:
        return str(empty)
    text = render_value(bounds[0], slots, aux_dtypes)
    for b in bounds[1:]:
        text = f"detail::{fn}({text}, {render_value(b, slots, aux_dtypes)})"
    return text


ROW_INTERVAL_COMMENT = """\
// Each query row's allowed keys, as one interval [lo, hi] (inclusive), where
// kRowInterval: a kernel may set a row's mask bits as one range (docs/hooks.md).
#define CUBRIDGE_HOOKS_ROW_INTERVAL 1  // (kRowInterval and row_interval are defined)"""


def render_row_interval(mask: Node | None, slots: Mapping[str, int],
                        aux_dtypes: Mapping[str, torch.dtype]) -> str:
    """kRowInterval and row_interval of a generated header (a stub where the mask
    has no row interval)."""
    iv = row_interval(mask)
    head = ("CUBRIDGE_HD cubridge::KeyInterval row_interval(int b, int h, int q, "
            "const AuxArgs& aux) {")
    unused = "  (void)b; (void)h; (void)q; (void)aux;"
    if iv is None:
        return "\n".join([ROW_INTERVAL_COMMENT, "constexpr bool kRowInterval = false;", head,
                          unused, "  return cubridge::KeyInterval{0, -1};", "}", ""])
    lines = [ROW_INTERVAL_COMMENT, "constexpr bool kRowInterval = true;", head, unused]
    for g in iv.guards:
        lines.append(f"  if (!({render_value(g, slots, aux_dtypes)})) "
                     "return cubridge::KeyInterval{0, -1};")
    lo = _fold(iv.lower, "max", NO_LOWER, slots, aux_dtypes)
    hi = _fold(iv.upper, "min", NO_UPPER, slots, aux_dtypes)
    lines += [f"  return cubridge::KeyInterval{{{lo}, {hi}}};", "}", ""]
    return "\n".join(lines)
