"""Pair reads: a hook's read of an aux tensor at [..., k] whose other indices depend
on (b, h, q) alone: score_mod's 16-bit read (a dense bias[b, h, q, k] kept in the
model's dtype) and mask_mod's 8-bit read (a dense boolean mask[b, h, q, k], as SDPA
users hand it). A key block of such a read is a [rows x block_n] tile of contiguous
rows, so a kernel may copy it into shared memory ahead of the block's scores
(cp.async, 16 bytes a copy) instead of reading every score's value after S is
ready, where its latency is exposed (docs/hooks.md, "Pair reads").

This module picks those reads and renders the hooks that give their rows
(`pair_row`, `mask_pair_row`) and the mods that take the value as an argument
(`score_mod_paired`, `mask_mod_paired`); the plain mods stay for kernels that do
not stage. The launcher keeps the tensors' rows 16-byte aligned
(`aligned_pair_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.cuda_render import AUX_C_TYPES, C_TYPES, render_body, render_value
from cubridge.transfer.expr import Node, free_vars

# The element types a kernel copies as raw patterns, per hook.
SCORE_PAIR_DTYPES = (torch.bfloat16, torch.float16, torch.int16)  # (int16: narrowed_indices.py)
MASK_PAIR_DTYPES = (torch.bool, torch.uint8, torch.int8)
CHUNK_BYTES = 16  # one copy: a pair read's rows start and end on such a boundary


@dataclass(frozen=True)
class PairHooks:
    """How one hook's pair read is spelled in the header."""

    macro: str         # CUBRIDGE_HOOKS_..._PAIR_READS
    count: str         # kPairReads / kMaskPairReads
    row: str           # pair_row / mask_pair_row
    elem: str          # the row pointer's element type
    paired: str        # score_mod_paired / mask_mod_paired: the read's pattern as `pair`
    returns: str       # its return type
    score_arg: bool    # whether it takes the score `s` first
    plain_return: str  # what it returns where there is no read

    def paired_signature(self) -> str:
        s = "float s, " if self.score_arg else ""
        return (f"{self.returns} {self.paired}({s}int b, int h, int q, int k, uint32_t pair, "
                "const AuxArgs& aux)")


SCORE = PairHooks("CUBRIDGE_HOOKS_PAIR_READS", "kPairReads", "pair_row", "uint16_t",
                  "score_mod_paired", "float", True, "s")
MASK = PairHooks("CUBRIDGE_HOOKS_MASK_PAIR_READS", "kMaskPairReads", "mask_pair_row", "uint8_t",
                 "mask_mod_paired", "bool", False, "true")


def pair_read(expr: Node | None, aux_dtypes: Mapping[str, torch.dtype],
              dtypes: tuple[torch.dtype, ...] = SCORE_PAIR_DTYPES) -> Node | None:
    """The first aux read of `expr` of one of `dtypes` that is a pair read, or None."""
    if expr is None:
        return None
    for n in expr.walk():
        if n.op != "aux_load" or len(n.args) < 2 or aux_dtypes.get(n.arg) not in dtypes:
            continue
        last = n.args[-1]
        rows = set().union(*(free_vars(a) for a in n.args[:-1]))
        if last.op == "var" and last.arg == "k" and "q" in rows and rows <= {"b", "h", "q"}:
            return n
    return None


def pair_slots(score: Node | None, mask: Node | None, slots: Mapping[str, int],
               aux_dtypes: Mapping[str, torch.dtype]) -> tuple[int, ...]:
    """The AuxArgs slots of the mods' pair reads."""
    reads = (pair_read(score, aux_dtypes, SCORE_PAIR_DTYPES),
             pair_read(mask, aux_dtypes, MASK_PAIR_DTYPES))
    return tuple(sorted({slots[n.arg] for n in reads if n is not None}))  # type: ignore[index]


def _render(hook: PairHooks, expr: Node | None, node: Node | None, slots: Mapping[str, int],
            aux_dtypes: Mapping[str, torch.dtype],
            pre_bound: Mapping[Node, str] | None = None, **render: bool) -> list[str]:
    head = [f"#define {hook.macro} 1  // ({hook.count}, {hook.row}, {hook.paired})",
            f"constexpr int {hook.count} = {0 if node is None else 1};"]
    signature = (f"CUBRIDGE_HD const {hook.elem}* {hook.row}(int b, int h, int q, "
                 "const AuxArgs& aux)")
    paired = f"CUBRIDGE_HD {hook.paired_signature()} {{"
    paired_unused = "  (void)b; (void)h; (void)q; (void)k; (void)pair; (void)aux;" + \
        (" (void)s;" if hook.score_arg else "")
    if node is None or expr is None:
        return [*head, f"{signature} {{", "  (void)b; (void)h; (void)q; (void)aux;",
                "  return nullptr;", "}", "",
                paired, paired_unused, f"  return {hook.plain_return};", "}", ""]
    slot = slots[node.arg]  # type: ignore[index]
    load_t = AUX_C_TYPES[aux_dtypes[node.arg]]  # type: ignore[index]
    offset = " + ".join(f"static_cast<int64_t>({render_value(a, slots, aux_dtypes)}) * "
                        f"aux.t[{slot}].stride[{d}]" for d, a in enumerate(node.args[:-1]))
    c_type = C_TYPES[node.dtype]
    value = (f"cubridge::widen16<{load_t}>(pair)" if hook is SCORE and load_t != "int16_t"
             else f"static_cast<{load_t}>(pair)" if load_t == c_type
             else f"static_cast<{c_type}>(static_cast<{load_t}>(pair))")
    body = render_body(expr, slots, aux_dtypes, pre_bound={**(pre_bound or {}), node: value},
                       **render)
    return [*head, f"// (slot {slot}: {node!r})", f"{signature} {{",
            "  (void)b; (void)h; (void)q;",
            f"  return static_cast<const {hook.elem}*>(aux.t[{slot}].data) + ({offset});",
            "}", "", paired, paired_unused, *body, "}", ""]


def render_pair_hooks(score: Node | None, slots: Mapping[str, int],
                      aux_dtypes: Mapping[str, torch.dtype],
                      pre_bound: Mapping[Node, str] | None = None) -> list[str]:
    """kPairReads, pair_row and score_mod_paired (CUBRIDGE_HOOKS_PAIR_READS);
    terms in `pre_bound` are spelled as given (distance tables)."""
    comment = ["// score_mod's read of a 16-bit aux tensor at [..., k] with the other indices",
               "// of (b, h, q): a kernel may stage its key block's rows (pair_row: the",
               "// element at k = 0, rows 16-byte aligned by the launcher) and pass each",
               "// score's 16-bit pattern to score_mod_paired (docs/hooks.md, \"Pair reads\")."]
    node = pair_read(score, aux_dtypes, SCORE_PAIR_DTYPES)
    return [*comment, *_render(SCORE, score, node, slots, aux_dtypes, pre_bound, fast=True,
                               contiguous_aux=True)]


def render_mask_pair_hooks(mask: Node | None, slots: Mapping[str, int],
                           aux_dtypes: Mapping[str, torch.dtype]) -> list[str]:
    """kMaskPairReads, mask_pair_row and mask_mod_paired (CUBRIDGE_HOOKS_MASK_PAIR_READS)."""
    comment = ["// mask_mod's read of an 8-bit aux tensor (bool, uint8, int8) at [..., k] with",
               "// the other indices of (b, h, q): a kernel may stage its key block's rows",
               "// (mask_pair_row) and pass each pair's byte to mask_mod_paired (docs/hooks.md)."]
    node = pair_read(mask, aux_dtypes, MASK_PAIR_DTYPES)
    return [*comment, *_render(MASK, mask, node, slots, aux_dtypes)]


def aligned_pair_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` itself where its rows (every index but the last) start on 16-byte
    boundaries and hold a whole number of 16-byte chunks (a contiguous last dim),
    else a copy whose rows are padded to that (a view of the same shape): the
    kernel copies them 16 bytes at a time, up to the last chunk a row's keys reach."""
    per_chunk = CHUNK_BYTES // t.element_size()
    rows_ok = all(st % per_chunk == 0
                  for sz, st in zip(t.shape[:-1], t.stride()[:-1], strict=True) if sz > 1)
    # the last row's last chunk must lie in the storage (a padded view's does)
    last = t.storage_offset() + sum((sz - 1) * st for sz, st in zip(t.shape, t.stride(),
                                                                    strict=True))
    in_storage = (last // per_chunk + 1) * per_chunk * t.element_size() \
        <= t.untyped_storage().nbytes()
    if (t.data_ptr() % CHUNK_BYTES == 0 and t.stride(-1) == 1 and rows_ok and in_storage
            and t.numel() > 0):
        return t
    n = t.shape[-1]
    padded = torch.empty(*t.shape[:-1], -(-n // per_chunk) * per_chunk,
                         dtype=t.dtype, device=t.device)
    padded[..., :n].copy_(t)
    return padded[..., :n]
