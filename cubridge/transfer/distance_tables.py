"""Distance tables: score_mod terms that depend on the head and the distance
q - k alone, and cost more than one read per score, are evaluated once per
problem into a table that the hooks read once per score (docs/hooks.md,
"Distance tables"), as block tables are built for data-dependent masks.

T5's bias, bias[h, bucket(k - q)] with a logarithm, clamps and a select in
the bucket, is a dozen instructions and a dependent gather on every score: its
fa_sm90 build spilled 380 B, over the library's register budget. Yet it takes
only Hq x (Sq + Sk - 1) values. The launcher evaluates such a term with torch,
exactly (where the kernel's fast log could round a distance into the next
bucket), into a [Hq, Sq + Sk - 1] table whose column q - k + Sk - 1 holds
distance q - k, and the hooks read it as relative_position's learned table is
read. Terms that are affine in the distance (ALiBi's slope[h] * (q - k)) or
already one read of a table at an affine column (relative_position) stay as
they are: there the arithmetic is cheaper than the table.

The expression tree keeps the term (the CuIR, the interval renderers and the
host-side checks read the spec's own semantics); only the CUDA renderer spells
it as the table read (cubridge.lower.hook_header), and `HookHeader.pack_aux`
builds the tables, cached per problem and aux tensors (`TABLES`). The
benchmark gives the Flex peers the same tables (cubridge.bench.distance_mods).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.attention import Shape
from cubridge.transfer.block_table import DerivedCache
from cubridge.transfer.expr import DType, Node, free_vars
from cubridge.transfer.torch_render import grid_function

# Tables per score_mod at most: each takes an AuxArgs slot.
MAX_TABLES = 2
TABLE_DTYPES = {DType.FLOAT: torch.float32, DType.INT: torch.int32}

# Work that a table read replaces with profit wherever it is: transcendental
# functions and divisions.
_COSTLY = frozenset({"log", "log2", "exp", "exp2", "tanh", "sigmoid", "sqrt", "erf", "sin",
                     "cos", "floordiv", "mod", "truediv"})
# Selections, clamps and roundings: an instruction or two on the score's own path,
# cheaper than the gather and its address that a table read costs there. They pay
# for a table only where they compute the index of a read (T5's bucket,
# `table[clamp(q - k, ...)]`): the gather then waits on them.
_SELECTS = frozenset({"where", "min", "max", "floor", "ceil"})


def _is_distance(n: Node) -> bool:
    """q - k or k - q of the bare positions."""
    return (n.op == "sub" and len(n.args) == 2
            and {a.op for a in n.args} == {"var"} and {a.arg for a in n.args} == {"q", "k"})


def _of_head_and_distance(n: Node) -> bool:
    """Whether `n` reads the positions only through their difference, and
    nothing of b or the score."""
    if _is_distance(n):
        return True
    if n.op == "var":
        return n.arg == "h"
    return all(_of_head_and_distance(a) for a in n.args)


def _uses_distance(n: Node) -> bool:
    return any(_is_distance(x) for x in n.walk())


def _costly(n: Node, selects: bool = False) -> bool:
    """Whether costly work depends on the distance (work on the head alone, ALiBi's
    slope computed from h, is the tile's, not the score's). Selections count only
    in a read's index, or anywhere with `selects` (the form before 2026-12-07,
    kept for A/B builds)."""
    dear = _COSTLY | _SELECTS if selects else _COSTLY
    if any(x.op in dear and _uses_distance(x) for x in n.walk()):
        return True
    return any(x.op in _SELECTS and _uses_distance(x)
               for read in n.walk() if read.op == "aux_load"
               for index in read.args for x in index.walk())


@dataclass(frozen=True, eq=False)
class DistanceTable:
    """One tabulated term: slot `name` holds term(h, d) at [h, d + Sk - 1]
    (a single row where the term does not read h). Compared by identity: it keys
    its tables in `TABLES` on every call, where hashing the term's tree took most
    of a call's 60 us."""

    name: str
    term: Node

    @property
    def by_head(self) -> bool:
        return "h" in free_vars(self.term)

    @property
    def dtype(self) -> torch.dtype:
        return TABLE_DTYPES[self.term.dtype]

    @functools.cached_property
    def aux_names(self) -> tuple[str, ...]:
        """The aux tensors the term reads."""
        names = {str(x.arg) for x in self.term.walk() if x.op == "aux_load"}
        names |= {str(x.arg[0]) for x in self.term.walk() if x.op == "aux_size"}  # type: ignore[index]
        return tuple(sorted(names))

    def build(self, shape: Shape, aux: Mapping[str, torch.Tensor],
              device: torch.device) -> torch.Tensor:
        """The table for one problem (cached by `TABLES`)."""
        missing = [n for n in self.aux_names if n not in aux]
        if missing:
            raise KeyError(f"{self.name} (score_mod's term {self.term!r}) reads aux {missing}, "
                           f"not given (got {sorted(aux)})")
        reads = {n: aux[n] for n in self.aux_names}
        key = (self, shape.hq, shape.sq, shape.sk, str(device))
        return TABLES.get(key, reads, lambda: self._evaluate(shape, reads, device))

    def _evaluate(self, shape: Shape, aux: Mapping[str, torch.Tensor],
                  device: torch.device) -> torch.Tensor:
        rows = shape.hq if self.by_head else 1
        width = shape.sq + shape.sk - 1
        # q - k runs over -(Sk - 1) .. Sq - 1 with k fixed at Sk - 1; q past Sq is
        # harmless: the term reads the positions only through their difference
        h = torch.arange(rows, device=device).view(-1, 1)
        q = torch.arange(width, device=device).view(1, -1)
        k = torch.tensor(shape.sk - 1, device=device)
        zero = torch.tensor(0, device=device)
        aux = {n: t.to(device) for n, t in aux.items()}
        values = grid_function(self.term)(zero, h, q, k, **aux)
        return torch.as_tensor(values, device=device).to(self.dtype).expand(
            rows, width).contiguous()


def distance_tables(score: Node | None, first_name: str = "__distance_table",
                    selects: bool = False) -> tuple[DistanceTable, ...]:
    """The largest terms of `score` worth a table, outermost first (`selects`:
    selections on the score's path count as costly too, the A/B's other side)."""
    found: list[DistanceTable] = []

    def visit(n: Node) -> None:
        if len(found) == MAX_TABLES:
            return
        if (n.dtype in TABLE_DTYPES and _of_head_and_distance(n) and _uses_distance(n)
                and _costly(n, selects)):
            if all(t.term != n for t in found):
                found.append(DistanceTable(f"{first_name}_{len(found)}", n))
            return
        for a in n.args:
            visit(a)

    if score is not None:
        visit(score)
    return tuple(found)


# The process-wide cache of tables (a cache: the only global state).
TABLES: DerivedCache[torch.Tensor] = DerivedCache(capacity=16)
