"""Pair reads: score_mod's read of a 16-bit aux tensor at [..., k] whose other
indices depend on (b, h, q) alone, e.g. a dense bias bias[b, h, q, k] kept in
the model's dtype. A key block of such a read is a [rows x block_n] tile of
contiguous rows, so a kernel may copy it into shared memory ahead of the block's
scores (cp.async, 16 bytes a copy) instead of reading every score's value after
S is ready, where its latency is exposed (docs/hooks.md, "Pair reads").

This module picks that read and renders the hooks that give its rows
(`pair_row`) and the score_mod that takes its value as an argument
(`score_mod_paired`); the plain score_mod stays for kernels that do not stage.
The launcher keeps the tensor's rows 16-byte aligned (`aligned_pair_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from cubridge.lower.cuda_render import AUX_C_TYPES, render_body, render_value
from cubridge.transfer.expr import Node, free_vars

# The element types a kernel copies as raw 16-bit patterns.
PAIR_DTYPES = (torch.bfloat16, torch.float16)
# Elements a 16-byte copy moves: a pair read's rows start on such a boundary.
ROW_ALIGN_ELEMENTS = 8


def pair_read(score: Node | None, aux_dtypes: Mapping[str, torch.dtype]) -> Node | None:
    """The first aux read of `score` that is a pair read, or None."""
    if score is None:
        return None
    for n in score.walk():
        if n.op != "aux_load" or len(n.args) < 2 or aux_dtypes.get(n.arg) not in PAIR_DTYPES:
            continue
        last = n.args[-1]
        rows = set().union(*(free_vars(a) for a in n.args[:-1]))
        if last.op == "var" and last.arg == "k" and "q" in rows and rows <= {"b", "h", "q"}:
            return n
    return None


def pair_slot(score: Node | None, slots: Mapping[str, int],
              aux_dtypes: Mapping[str, torch.dtype]) -> int | None:
    """The AuxArgs slot of score's pair read, or None."""
    n = pair_read(score, aux_dtypes)
    return None if n is None else slots[n.arg]  # type: ignore[index]


def render_pair_hooks(score: Node | None, slots: Mapping[str, int],
                      aux_dtypes: Mapping[str, torch.dtype]) -> list[str]:
    """kPairReads, pair_row and score_mod_paired (CUBRIDGE_HOOKS_PAIR_READS)."""
    n = pair_read(score, aux_dtypes)
    head = ["// score_mod's read of a 16-bit aux tensor at [..., k] with the other indices",
            "// of (b, h, q): a kernel may stage its key block's rows (pair_row: the",
            "// element at k = 0, rows 16-byte aligned by the launcher) and pass each",
            "// score's 16-bit pattern to score_mod_paired (docs/hooks.md, \"Pair reads\").",
            "#define CUBRIDGE_HOOKS_PAIR_READS 1  // (kPairReads, pair_row, score_mod_paired)",
            f"constexpr int kPairReads = {0 if n is None else 1};"]
    paired = "CUBRIDGE_HD float score_mod_paired(float s, int b, int h, int q, int k, " \
             "uint32_t pair, const AuxArgs& aux) {"
    unused = "  (void)s; (void)b; (void)h; (void)q; (void)k; (void)pair; (void)aux;"
    if n is None or score is None:
        return [*head,
                "CUBRIDGE_HD const uint16_t* pair_row(int b, int h, int q, const AuxArgs& aux) {",
                "  (void)b; (void)h; (void)q; (void)aux;",
                "  return nullptr;",
                "}",
                "",
                paired, unused, "  return s;", "}", ""]
    slot = slots[n.arg]  # type: ignore[index]
    load_t = AUX_C_TYPES[aux_dtypes[n.arg]]  # type: ignore[index]
    rank = len(n.args)
    idx = [render_value(a, slots, aux_dtypes) for a in n.args[:-1]]
    offset = " + ".join(f"static_cast<int64_t>({i}) * aux.t[{slot}].stride[{d}]"
                        for d, i in enumerate(idx))
    body = render_body(score, slots, aux_dtypes, fast=True, contiguous_aux=True,
                       pre_bound={n: f"cubridge::widen16<{load_t}>(pair)"})
    return [*head,
            f"// (slot {slot}, rank {rank}: {n!r})",
            "CUBRIDGE_HD const uint16_t* pair_row(int b, int h, int q, const AuxArgs& aux) {",
            "  (void)b; (void)h; (void)q;",
            f"  return static_cast<const uint16_t*>(aux.t[{slot}].data) + ({offset});",
            "}",
            "",
            paired, unused, *body, "}", ""]


def aligned_pair_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` itself where its rows (every index but the last) start on 16-byte
    boundaries and hold a whole number of 16-byte chunks (a contiguous last dim of a
    multiple of 8 elements), else a copy whose rows are padded to that (a view of the
    same shape): the kernel copies and prefetches them 16 bytes at a time, up to the
    last chunk a row's keys reach."""
    elem = t.element_size()
    rows_ok = all(st % ROW_ALIGN_ELEMENTS == 0
                  for sz, st in zip(t.shape[:-1], t.stride()[:-1], strict=True) if sz > 1)
    if (t.data_ptr() % (ROW_ALIGN_ELEMENTS * elem) == 0 and t.stride(-1) == 1 and rows_ok
            and t.shape[-1] % ROW_ALIGN_ELEMENTS == 0):
        return t
    n = t.shape[-1]
    padded = torch.empty(*t.shape[:-1], -(-n // ROW_ALIGN_ELEMENTS) * ROW_ALIGN_ELEMENTS,
                         dtype=t.dtype, device=t.device)
    padded[..., :n].copy_(t)
    return padded[..., :n]
