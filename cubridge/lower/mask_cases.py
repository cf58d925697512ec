"""Mask cases: the choices of a mask_mod that depend on the batch and head alone.

Sparse Transformer's strided heads (`torch.where(h % 2 == 1, (q - k) % 128 == 0,
q - k < 128)`) or a local and a global pattern per head choose between masks by a
condition on (b, h). Evaluated per score, the choice computes both sides and selects
one; in fa_sm90's mask loop (64 scores a thread, unrolled) that spilled 108-116 B.
The condition is the same for a whole tile, so a kernel may branch once a block on
`mask_case(b, h)` and evaluate the case's mask, in which each condition is a constant
and only its own side remains (mask_mod_case<C>, docs/hooks.md).

Such conditions ("case atoms") are the mask's largest boolean subexpressions that
read no query or key index, bar constants. Each doubles the code of a kernel's mask
loop, so past MAX_CASE_ATOMS a mask keeps its per-score choice.

A case's mask (the whole mask where there are no cases) may allow each row a union
of key sets (row_interval.py with periods: intervals, or one residue of them modulo a
constant, as the strided heads' `(q - k) % 128 == 0`). The header then gives them
(case_key_sets, case_key_set<C>) and a kernel may set a row's bits in a few operations
a set instead of a mask_mod_case per pair.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from cubridge.lower.cuda_render import render_body, render_value
from cubridge.lower.row_interval import RowInterval, interval_returns, row_intervals
from cubridge.lower.staged_reads import staged_reads, staged_spellings
from cubridge.transfer.expr import DType, Node, apply, const, free_vars, substitute
from cubridge.transfer.simplify import simplify

# Up to 2 ** MAX_CASE_ATOMS copies of the mask loop.
MAX_CASE_ATOMS = 2
UNIFORM_VARS = frozenset({"b", "h"})


def case_atoms(mask: Node) -> tuple[Node, ...]:
    """The conditions on (b, h) alone inside a mask that reads q or k, in first-seen
    order; () where there are none or more than MAX_CASE_ATOMS."""
    if not free_vars(mask) - UNIFORM_VARS:
        return ()
    atoms: list[Node] = []
    seen: set[Node] = set()

    def visit(n: Node) -> None:
        if n in seen:
            return
        seen.add(n)
        if not free_vars(n) - UNIFORM_VARS:
            if n.dtype == DType.BOOL and n.op != "const" and n not in atoms:
                atoms.append(n)
            return  # (a uniform value of another type is hoisted by the compiler)
        for a in n.args:
            visit(a)

    visit(mask)
    return tuple(atoms) if len(atoms) <= MAX_CASE_ATOMS else ()


def case_masks(mask: Node, atoms: tuple[Node, ...]) -> tuple[Node, ...]:
    """The mask of each case: case c sets atom i to bit i of c."""
    return tuple(
        simplify(substitute(mask, {a: const(bool(c >> i & 1)) for i, a in enumerate(atoms)}))
        for c in range(1 << len(atoms)))


def render_mask_cases(mask: Node | None, slots: Mapping[str, int],
                      aux_dtypes: Mapping[str, torch.dtype]) -> list[str]:
    """CUBRIDGE_HOOKS_MASK_CASES: kMaskCases, mask_case and the case masks in the
    plain and the staged form (mask_mod_case, mask_mod_staged_case)."""
    atoms = case_atoms(mask) if mask is not None else ()
    masks = case_masks(mask, atoms) if mask is not None and atoms else ()
    if atoms:
        index = None
        for i, a in enumerate(atoms):
            bit = apply("where", a, const(1 << i), const(0))
            index = bit if index is None else apply("bitor", index, bit)
        case_body = render_body(index, slots, aux_dtypes)  # type: ignore[arg-type]
    else:
        case_body = ["  return 0;"]
    staged = staged_spellings(staged_reads(mask)) if mask is not None else {}

    def cases(bound: Mapping[Node, str], fallback: str) -> list[str]:
        out: list[str] = []
        for c, m in enumerate(masks):
            out.append(f"  {'if' if c == 0 else '} else if'} constexpr (C == {c}) {{")
            out += ["  " + line for line in render_body(m, slots, aux_dtypes, pre_bound=bound)]
        out += ["  } else {" if masks else "  {", f"    return {fallback};", "  }"]
        return out

    return [
        "// The mask's choices on the batch and head alone, such as a pattern per head",
        "// parity: case C sets choice i to bit i of C. A kernel may branch once a block",
        "// on mask_case and evaluate mask_mod_case<C>, where each choice is a constant",
        "// (kMaskCases 1: no such choice; docs/hooks.md).",
        "#define CUBRIDGE_HOOKS_MASK_CASES 1  // (kMaskCases, mask_case, mask_mod_case, "
        "mask_mod_staged_case)",
        f"constexpr int kMaskCases = {len(masks) or 1};",
        "CUBRIDGE_HD int mask_case(int b, int h, const AuxArgs& aux) {",
        "  (void)b; (void)h; (void)aux;",
        *case_body,
        "}",
        "",
        "template <int C>",
        "CUBRIDGE_HD bool mask_mod_case(int b, int h, int q, int k, const AuxArgs& aux) {",
        "  (void)b; (void)h; (void)q; (void)k; (void)aux;",
        *cases({}, "mask_mod(b, h, q, k, aux)"),
        "}",
        "",
        "template <int C>",
        "CUBRIDGE_HD bool mask_mod_staged_case(int b, int h, int q, int k, "
        "cubridge::Staged row_vals,",
        "                                      cubridge::Staged key_vals, const AuxArgs& aux) {",
        "  (void)b; (void)h; (void)q; (void)k; (void)row_vals; (void)key_vals; (void)aux;",
        *cases(staged, "mask_mod_staged(b, h, q, k, row_vals, key_vals, aux)"),
        "}",
        "",
        *render_case_key_sets(mask, masks, slots, aux_dtypes),
    ]


def _odd(iv: RowInterval) -> bool:
    """A key set's period is not a power of two (a kernel takes it only with
    CUBRIDGE_HOOKS_ODD_PERIODS)."""
    return iv.period & (iv.period - 1) != 0


def render_case_key_sets(mask: Node | None, masks: tuple[Node, ...],
                         slots: Mapping[str, int],
                         aux_dtypes: Mapping[str, torch.dtype]) -> list[str]:
    """case_key_sets(c) (each case's count of key sets, 0: none, mask_mod_case per pair),
    kKeySetCases (how many cases have them) and case_key_set<C>(i, b, h, q, aux) of the
    case masks (the whole mask where it has no cases). None where the whole mask has
    row intervals: a kernel sets its bits from those."""
    if mask is None or row_intervals(mask) is not None:
        sets: list = [()] * max(len(masks), 1)
    else:
        sets = [row_intervals(m, periods=True) or () for m in masks or (mask,)]

    def fields(lo: str, hi: str, iv) -> str:
        if iv is not None and _odd(iv) and lo == "0" and hi == "-1":
            return f"0, -1, {iv.period}, 0, 1"  # (no keys; the period stays a constant)
        if iv is None or iv.period == 1 or lo == "0" and hi == "-1":
            return f"{lo}, {hi}, 1, 0, 1"
        return (f"{lo}, {hi}, {iv.period}, {render_value(iv.phase, slots, aux_dtypes)}, "
                f"{iv.width}")

    odd = any(_odd(iv) for intervals in sets for iv in intervals)
    # (headers without such a period read as they did before there were any)
    about = (["// for 0 <= t < width (a power of two; 1: every key). A kernel may set a row's bits",
              "// from them, a few operations a set, instead of a mask_mod_case per pair",
              "// (docs/hooks.md)."] if not odd else
             ["// for 0 <= t < width (1: every key; width 1 where the period is not a power of",
              "// two). A kernel may set a row's bits from them, a few operations a set, instead",
              "// of a mask_mod_case per pair (docs/hooks.md)."])
    out = [
        "// Each case's rows' allowed keys, where its mask has that form: the union of",
        "// case_key_sets(C) key sets, the keys of [lo, hi] equal to phase + t modulo period",
        *about,
        "#define CUBRIDGE_HOOKS_CASE_KEY_SETS 1  // (case_key_sets, kKeySetCases, case_key_set)",
        *(["#define CUBRIDGE_HOOKS_ODD_PERIODS 1    // (some period is not a power of two)"]
          if odd else []),
        "CUBRIDGE_HD constexpr int case_key_sets(int c) {",
        "  (void)c;",
        "  return " + "".join(f"c == {c} ? {len(x)} : " for c, x in enumerate(sets) if x) + "0;",
        "}",
        f"constexpr int kKeySetCases = {sum(1 for x in sets if x)};",
        "template <int C>",
        "CUBRIDGE_HD cubridge::KeySet case_key_set(int i, int b, int h, int q, "
        "const AuxArgs& aux) {",
        "  (void)i; (void)b; (void)h; (void)q; (void)aux;",
    ]
    with_sets = [(c, intervals) for c, intervals in enumerate(sets) if intervals]
    for n, (c, intervals) in enumerate(with_sets):
        out.append(f"  {'if' if n == 0 else '} else if'} constexpr (C == {c}) {{")
        out += ["    " + line for line in interval_returns(intervals, "KeySet", fields, slots,
                                                           aux_dtypes)]
    empty = "return cubridge::KeySet{0, -1, 1, 0, 1};"
    out += ["  } else {", f"    {empty}", "  }"] if with_sets else [f"  {empty}"]
    return out + ["}", ""]
