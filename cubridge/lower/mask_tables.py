"""Mask tables: a mask_mod of the positions (q, k) alone that reads an aux tensor
at a function of the key is evaluated, per problem, into a boolean [Sq, Sk] table
that the hooks read as a mask pair read (docs/hooks.md, "Mask tables").

jetspec's tree mask (attention-gym's `generate_jetspec_tree_causal_mask_mod`)
reads `ancestors[q, clamp(k - prefix, 0, n - 1)]` beside the prefix and range
tests: a byte read at a computed column per pair after the scores, 284 B of
spill traffic on fa_sm90 at D = 128. Such a mask is the same for every batch
row and head, so its [Sq, Sk] values are what an SDPA user would hand as a
dense boolean mask: the launcher evaluates the traced mask with torch over the
grid (exact, as block tables are built) and the hooks read `table[q, k]`, which
kernels stage through shared memory (cubridge.lower.pair_reads). The plan keeps
the mask (its CuIR, its block table, the host checks); only the CUDA hooks read
the table, as with distance tables and pair codes.

A mask takes a table when it reads an 8-bit tensor at [rows of q, f(k)], f index
arithmetic on the key alone; masks whose key indices come from aux reads
(documents, Flamingo's images) keep the structure that their block tables, row
intervals and key runs use.

A table takes Sq x Sk bytes; a problem past `MAX_TABLE_BYTES` is refused at the
call with a ValueError that says so.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.pair_reads import MASK_PAIR_DTYPES, aligned_pair_rows
from cubridge.transfer.block_table import DerivedCache
from cubridge.transfer.expr import DType, Node, aux_reads, free_vars, var
from cubridge.transfer.torch_render import grid_function

TABLE_DTYPE = torch.bool
MAX_TABLE_BYTES = 2**30  # Sq x Sk: 32k x 32k


def _pair_read_at_a_key_function(n: Node, aux_dtypes: Mapping[str, torch.dtype]) -> bool:
    """A read of an 8-bit tensor at [rows of q, f(k)], f index arithmetic on the key
    alone (no aux read: those are index structure that block tables and key runs
    use), not k itself (a pair read already)."""
    if n.op != "aux_load" or len(n.args) < 2 or aux_dtypes.get(n.arg) not in MASK_PAIR_DTYPES:
        return False
    last, rows = n.args[-1], set().union(*(free_vars(a) for a in n.args[:-1]))
    return (free_vars(last) == {"k"} and last.op != "var" and "q" in rows
            and not any(m.op in ("aux_load", "aux_size") for m in last.walk()))


@dataclass(frozen=True, eq=False)
class MaskTable:
    """Aux `name` holds the mask at [q, k]. Compared by identity (it keys the cache)."""

    name: str
    mask: Node

    def read(self) -> Node:
        return Node("aux_load", DType.BOOL, (var("q"), var("k")), self.name)

    @functools.cached_property
    def aux_names(self) -> tuple[str, ...]:
        """The aux tensors the mask reads."""
        return tuple(sorted(aux_reads(self.mask)))

    def build(self, aux: Mapping[str, torch.Tensor], sq: int, sk: int,
              device: torch.device) -> torch.Tensor:
        """The [Sq, Sk] table of one problem, rows aligned for staging (cached)."""
        if sq * sk > MAX_TABLE_BYTES:
            raise ValueError(
                f"mask_mod {self.mask!r} is read from a [Sq, Sk] table, and Sq x Sk = "
                f"{sq} x {sk} bytes is past the {MAX_TABLE_BYTES} that mask tables take "
                "(docs/hooks.md, \"Mask tables\")")
        missing = [n for n in self.aux_names if n not in aux]
        if missing:
            raise KeyError(f"{self.name} (mask_mod {self.mask!r}) reads aux {missing}, "
                           f"not given (got {sorted(aux)})")
        reads = {n: aux[n] for n in self.aux_names}
        return TABLES.get((self, sq, sk, str(device)), reads,
                          lambda: self._evaluate(reads, sq, sk, device))

    def _evaluate(self, aux: Mapping[str, torch.Tensor], sq: int, sk: int,
                  device: torch.device) -> torch.Tensor:
        zero = torch.tensor(0, device=device)
        q = torch.arange(sq, device=device).view(-1, 1)
        k = torch.arange(sk, device=device).view(1, -1)
        try:
            values = grid_function(self.mask)(zero, zero, q, k,
                                              **{n: t.to(device) for n, t in aux.items()})
        except (IndexError, RuntimeError) as e:
            raise ValueError(f"mask_mod {self.mask!r} fails on the grid of Sq x Sk = "
                             f"{sq} x {sk}: {e}") from None
        table = torch.as_tensor(values, device=device).to(TABLE_DTYPE).expand(sq, sk)
        return aligned_pair_rows(table.contiguous())


def mask_table(mask: Node | None, aux_dtypes: Mapping[str, torch.dtype],
               name: str = "__mask_table") -> MaskTable | None:
    """The table of a mask of (q, k) alone that reads an 8-bit tensor at
    [q, f(k)] (module doc), or None."""
    if mask is None or not free_vars(mask) <= {"q", "k"}:
        return None
    if not any(_pair_read_at_a_key_function(n, aux_dtypes) for n in mask.walk()):
        return None
    return MaskTable(name, mask)


# The process-wide cache of tables (a cache: the only global state).
TABLES: DerivedCache[torch.Tensor] = DerivedCache(capacity=8)
