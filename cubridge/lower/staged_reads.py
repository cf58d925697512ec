"""Staged reads: mask_mod's aux reads that depend on the key alone (kv_doc[b,
k]) or on the query alone (q_doc[b, q]), with b and h, are evaluated by the
kernel once per key block or query block into shared memory, instead of once
per score from global memory between the key loop's barriers (docs/hooks.md).

This module picks those reads and renders the hooks that stage them and the
mask_mod_staged that reads them back; the plain mask_mod stays for kernels
that do not stage. Beside them it declares what a kernel may do with the mask
ahead of the scores: CUBRIDGE_HOOKS_MASK_INDEX_ONLY (no aux read) and
CUBRIDGE_HOOKS_MASK_KEY_TERMS (index terms of the key alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.cuda_render import C_TYPES, render_body, render_value
from cubridge.transfer.expr import Node, free_vars

# Reads staged per side at most (the kernel's shared-memory arrays are sized by
# the header's counts; further reads stay per-score loads).
MAX_STAGED = 4


@dataclass(frozen=True)
class StagedReads:
    key: tuple[Node, ...]  # aux reads of (b, h, k) that involve k
    row: tuple[Node, ...]  # aux reads of (b, h, q) that involve q


def staged_reads(mask: Node) -> StagedReads:
    """The aux reads of `mask` that can be staged, in first-seen order."""
    key: list[Node] = []
    row: list[Node] = []
    for n in mask.walk():
        if n.op != "aux_load" or not n.args:
            continue
        used = set().union(*(free_vars(a) for a in n.args))
        side = key if used <= {"b", "h", "k"} and "k" in used else \
            row if used <= {"b", "h", "q"} and "q" in used else None
        if side is not None and n not in side and len(side) < MAX_STAGED:
            side.append(n)
    return StagedReads(tuple(key), tuple(row))


# Index work on the key alone that a kernel should not keep live for every row.
_KEY_TERM_OPS = frozenset({"floordiv", "mod", "truediv", "min", "max", "where", "abs",
                           "bitand", "bitor", "bitxor", "shl", "shr"})


def derives_key_terms(mask: Node) -> bool:
    """Whether `mask` computes index terms from the key alone (b and h aside): a
    2-D or 3-D position's coordinates, a clamped column. Reads are not counted
    (they are staged) nor are sums and products (they fold into immediates)."""
    for n in mask.walk():
        used = free_vars(n)
        if n.op in _KEY_TERM_OPS and "k" in used and used <= {"b", "h", "k"}:
            return True
    return False


def _stage_function(name: str, var: str, nodes: tuple[Node, ...], slots: Mapping[str, int],
                    aux_dtypes: Mapping[str, torch.dtype]) -> str:
    """`uint32_t name(int i, int b, int h, int var, aux)`: read i's 32-bit pattern."""
    cases = [f"    case {i}: return cubridge::staged_bits({render_value(n, slots, aux_dtypes)});"
             for i, n in enumerate(nodes)]
    return "\n".join([
        f"CUBRIDGE_HD uint32_t {name}(int i, int b, int h, int {var}, const AuxArgs& aux) {{",
        f"  (void)i; (void)b; (void)h; (void){var}; (void)aux;",
        *(["  switch (i) {", *cases, "  }"] if cases else []),
        "  return 0u;",
        "}",
        "",
    ])


def staged_spellings(reads: StagedReads) -> dict[Node, str]:
    """Each staged read as a hook taking `row_vals` and `key_vals` spells it."""
    bound = {n: f"cubridge::staged_value<{C_TYPES[n.dtype]}>(key_vals[{i}])"
             for i, n in enumerate(reads.key)}
    bound |= {n: f"cubridge::staged_value<{C_TYPES[n.dtype]}>(row_vals[{i}])"
              for i, n in enumerate(reads.row)}
    return bound


def render_staged_hooks(mask: Node | None, slots: Mapping[str, int],
                        aux_dtypes: Mapping[str, torch.dtype]) -> list[str]:
    """kKeyStaged, kRowStaged, CUBRIDGE_HOOKS_MASK_INDEX_ONLY and
    CUBRIDGE_HOOKS_MASK_KEY_TERMS (where they hold), key_staged, row_staged and
    mask_mod_staged."""
    reads = staged_reads(mask) if mask is not None else StagedReads((), ())
    bound = staged_spellings(reads)
    if mask is None:
        body = ["  return true;"]
    else:
        body = render_body(mask, slots, aux_dtypes, pre_bound=bound)
    reads_aux = mask is not None and any(n.op == "aux_load" for n in mask.walk())
    return [
        "#define CUBRIDGE_HOOKS_STAGED_READS 1  // this header stages reads (docs/hooks.md)",
        f"constexpr int kKeyStaged = {len(reads.key)};",
        f"constexpr int kRowStaged = {len(reads.row)};",
        *([] if reads_aux else [
            "// mask_mod is index arithmetic alone (no aux read): a kernel may evaluate it",
            "// ahead of the scores, where it is cheapest in registers (docs/hooks.md)",
            "#define CUBRIDGE_HOOKS_MASK_INDEX_ONLY 1"]),
        *([] if mask is None or not derives_key_terms(mask) else [
            "// mask_mod derives index terms from the key alone: a kernel may evaluate it",
            "// keys outer, so that they die after their column (docs/hooks.md)",
            "#define CUBRIDGE_HOOKS_MASK_KEY_TERMS 1"]),
        "",
        _stage_function("key_staged", "k", reads.key, slots, aux_dtypes),
        _stage_function("row_staged", "q", reads.row, slots, aux_dtypes),
        "CUBRIDGE_HD bool mask_mod_staged(int b, int h, int q, int k, cubridge::Staged row_vals,",
        "                                 cubridge::Staged key_vals, const AuxArgs& aux) {",
        "  (void)b; (void)h; (void)q; (void)k; (void)row_vals; (void)key_vals; (void)aux;",
        *body,
        "}",
        "",
    ]
