"""Mask reads at a function of the key: mask_mod's read of an 8-bit aux tensor at
[..., f(k)] whose other indices depend on (b, h, q) alone and whose last index is a
function of the key alone, such as jetspec's tree mask reading
`ancestors[q, clamp(k - prefix, 0, n - 1)]`. Read per pair after the scores, its
bytes a thread spilled fa_sm90 (284 B, docs/flex_attention.md).

The launcher gathers the tensor's last dim once per key length, X'[..., k] =
X[..., f(k)] for k in [0, Sk) (f evaluated on the host: it reads no aux, so no
device work waits for it), and the hooks read X' at [..., k] instead: a mask pair
read, which a kernel stages like a dense boolean mask (cubridge.lower.pair_reads).
Element by element X' holds what the mod reads, so every hook computes what it did;
an index out of the tensor's range for some key (which the mod would read out of
bounds there) is an error at the call, naming the tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.pair_reads import MASK_PAIR_DTYPES, aligned_pair_rows
from cubridge.transfer.block_table import DerivedCache
from cubridge.transfer.expr import Node, free_vars, var
from cubridge.transfer.torch_render import grid_function

# Past this many bytes the gathered copy is not made (the mod's reads stay per pair):
# X' has Sk entries per row of X, whatever X's last dim.
MAX_GATHERED_BYTES = 256 * 2**20


@dataclass(frozen=True)
class KeyGather:
    """Aux `source` read at [..., index(k)]; its gathered copy is aux `name`."""

    name: str
    source: str
    index: Node  # of k alone

    def indices(self, seqlen_k: int, size: int) -> torch.Tensor:
        """index(k) for k in [0, seqlen_k) on the host, wrapped into [0, size) as torch
        indexing wraps negative indices; ValueError where one is out of range."""
        k = torch.arange(seqlen_k, dtype=torch.int64)
        idx = grid_function(self.index)(torch.tensor(0), torch.tensor(0), torch.tensor(0), k)
        idx = torch.broadcast_to(torch.as_tensor(idx, dtype=torch.int64), (seqlen_k,))
        bad = (idx < -size) | (idx >= size)
        if bool(bad.any()):
            first = int(torch.nonzero(bad)[0])
            raise ValueError(
                f"aux {self.source!r}: the mask reads its last dim (size {size}) at "
                f"{self.index!r} = {int(idx[first])} for key {first}, out of range")
        return torch.where(idx < 0, idx + size, idx)

    def build(self, t: torch.Tensor, seqlen_k: int) -> torch.Tensor:
        """X' for one key length, rows aligned for staging (cached per tensor)."""
        if t.dtype not in MASK_PAIR_DTYPES:
            raise ValueError(f"aux {self.source!r}: hooks gather it as an 8-bit mask "
                             f"tensor, got {t.dtype}")
        return GATHERED.get(
            ("key_gather", self.source, self.index, seqlen_k), {self.source: t},
            lambda: aligned_pair_rows(t.index_select(
                t.dim() - 1, self.indices(seqlen_k, t.shape[-1]).to(t.device, non_blocking=True))))


# Gathered copies, reused while the tensor is unmodified.
GATHERED: DerivedCache[torch.Tensor] = DerivedCache(capacity=8)


def _gathered_read(n: Node, aux_dtypes: Mapping[str, torch.dtype]) -> bool:
    if n.op != "aux_load" or len(n.args) < 2 or aux_dtypes.get(n.arg) not in MASK_PAIR_DTYPES:
        return False
    last = n.args[-1]
    rows = set().union(*(free_vars(a) for a in n.args[:-1]))
    key_only = free_vars(last) == {"k"} and not any(
        m.op in ("aux_load", "aux_size") for m in last.walk())
    plain = last.op == "var"  # (at k itself: a pair read already)
    return key_only and not plain and "q" in rows and rows <= {"b", "h", "q"}


def key_gathers(mask: Node | None, aux_dtypes: Mapping[str, torch.dtype],
                first_name: str = "__key_gather") -> tuple[KeyGather, ...]:
    """mask_mod's reads at a function of the key (one gather per tensor and
    function), in the order the renderer meets them."""
    if mask is None:
        return ()
    out: dict[tuple[object, Node], KeyGather] = {}
    for n in mask.walk():
        if _gathered_read(n, aux_dtypes) and (n.arg, n.args[-1]) not in out:
            out[(n.arg, n.args[-1])] = KeyGather(f"{first_name}_{len(out)}", n.arg,  # type: ignore[arg-type]
                                                 n.args[-1])
    return tuple(out.values())


def gathered_mask(mask: Node | None, gathers: tuple[KeyGather, ...]) -> Node | None:
    """`mask` with each gathered read replaced by its copy's read at [..., k]."""
    if mask is None or not gathers:
        return mask
    by_read = {(g.source, g.index): g.name for g in gathers}
    k = var("k")
    done: dict[int, Node] = {}

    def go(n: Node) -> Node:
        if id(n) in done:
            return done[id(n)]
        if n.op == "aux_load" and len(n.args) >= 2 and (n.arg, n.args[-1]) in by_read:
            args = tuple(go(a) for a in n.args[:-1])
            out = Node("aux_load", n.dtype, (*args, k), by_read[(n.arg, n.args[-1])])
        elif n.args:
            out = Node(n.op, n.dtype, tuple(go(a) for a in n.args), n.arg)
        else:
            out = n
        done[id(n)] = out
        return out

    return go(mask)
