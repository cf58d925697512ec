"""Index reads narrowed to 16 bits: an integer aux tensor that score_mod reads
at [..., k] with its other indices of (b, h, q) (a pair read) and uses only as
an index into small tables, such as Graphormer's shortest-path distances in
`spatial_bias[h, distances[b, q, k]]`, is packed as int16 so that a kernel can
stage its key blocks like a 16-bit bias (cubridge.lower.pair_reads).

Read as int32 per score, such a read's 64 values a thread spilled on fa_sm90
(1,140 B, docs/flex_attention.md). Narrowing changes no valid program: every
index that is in range for a dimension of at most 2^15 entries, counted from
either end, lies in [-2^15, 2^15), which int16 holds exactly; a value outside
was out of range before and stays so. The indexed dimensions must therefore be
ones whose sizes are known when the header is made (tensors the mods capture,
integers in a spec's AUX_SHAPES), and `check_indexed` holds a call's tensors
to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.pair_reads import aligned_pair_rows
from cubridge.transfer.block_table import DerivedCache
from cubridge.transfer.expr import DType, Node, free_vars

NARROW_DTYPE = torch.int16
_WIDE = (torch.int32, torch.int64)
MAX_INDEXED = 2 ** 15  # entries of a dimension whose every valid index fits int16


@dataclass(frozen=True)
class NarrowedIndex:
    """Aux `name`, packed as int16, indexes only these (aux, dim) of known size."""

    name: str
    indexes: tuple[tuple[str, int], ...]

    def check_indexed(self, aux: Mapping[str, torch.Tensor]) -> None:
        """Raise where a call's indexed table has outgrown int16's indices."""
        for table, dim in self.indexes:
            t = aux.get(table)
            if t is not None and t.shape[dim] > MAX_INDEXED:
                raise ValueError(
                    f"aux {table!r} has {t.shape[dim]} entries in dim {dim}, but the hooks "
                    f"read aux {self.name!r} as int16 indices into it (at most {MAX_INDEXED} "
                    "entries, its size when the hooks were made): make the hooks again "
                    "for this table")


def _is_pair_read(n: Node) -> bool:
    if n.op != "aux_load" or len(n.args) < 2:
        return False
    last, rows = n.args[-1], set().union(*(free_vars(a) for a in n.args[:-1]))
    return last.op == "var" and last.arg == "k" and "q" in rows and rows <= {"b", "h", "q"}


def _strip_int_casts(n: Node) -> Node:
    while n.op == "cast" and n.dtype == DType.INT:
        n = n.args[0]
    return n


def _index_uses(roots: list[Node], name: str) -> list[tuple[Node, int]] | None:
    """Each (aux_load, dim) that takes a read of `name` as an index, through integer
    casts only; None where a read of `name` is used any other way or is not one
    pair read."""
    reads: set[Node] = set()
    uses: list[tuple[Node, int]] = []
    for root in roots:
        if _strip_int_casts(root).arg == name and _strip_int_casts(root).op == "aux_load":
            return None  # the mod returns the value itself
        for n in root.walk():
            if n.op == "aux_load" and n.arg == name:
                reads.add(n)
            if n.op == "cast" and n.dtype == DType.INT:
                continue  # transparent: its parent is the use
            for d, a in enumerate(n.args):
                inner = _strip_int_casts(a)
                if inner.op != "aux_load" or inner.arg != name:
                    continue
                if n.op != "aux_load" or n.arg == name:
                    return None
                uses.append((n, d))
    if len(reads) != 1 or not _is_pair_read(next(iter(reads))):
        return None
    return uses


def narrowed_indices(score: Node | None, mask: Node | None,
                     aux_dtypes: Mapping[str, torch.dtype],
                     fixed_dims: Mapping[str, tuple[int | None, ...]]
                     ) -> tuple[NarrowedIndex, ...]:
    """The aux tensors of score_mod's pair reads that can be packed as int16:
    integer, read once per score at [..., k], used only as indices into
    dimensions of at most 2^15 entries that no problem changes (`fixed_dims`,
    HookPlan's)."""
    if score is None:
        return ()
    roots = [score] + ([mask] if mask is not None else [])
    out: list[NarrowedIndex] = []
    for n in score.walk():
        if (not _is_pair_read(n) or aux_dtypes.get(n.arg) not in _WIDE  # type: ignore[arg-type]
                or any(o.name == n.arg for o in out)):
            continue
        uses = _index_uses(roots, n.arg)  # type: ignore[arg-type]
        if not uses:
            continue
        indexes = tuple(sorted({(u.arg, d) for u, d in uses}))  # type: ignore[misc]
        sizes = [fixed_dims.get(t, ())[d:d + 1] for t, d in indexes]
        if all(sz and sz[0] is not None and sz[0] <= MAX_INDEXED for sz in sizes):
            out.append(NarrowedIndex(n.arg, indexes))  # type: ignore[arg-type]
    return tuple(out)


# int16 copies of the narrowed tensors, reused while the tensor is unmodified.
NARROWED: DerivedCache[torch.Tensor] = DerivedCache(capacity=8)


def narrowed(name: str, t: torch.Tensor) -> torch.Tensor:
    """`t` as int16 with rows aligned for staging (cached per tensor)."""
    if t.dtype == NARROW_DTYPE:
        return aligned_pair_rows(t)
    if t.dtype not in _WIDE:
        raise ValueError(f"aux {name!r}: hooks read it as int16 indices, narrowed from int32 "
                         f"or int64; got {t.dtype}")
    return NARROWED.get(("narrowed", name), {name: t},
                        lambda: aligned_pair_rows(t.to(NARROW_DTYPE)))
