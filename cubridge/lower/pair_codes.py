"""Pair codes: a score_mod term that reads several integers at the same pair and
gathers table entries by them is folded, per problem, into one int16 code per
pair and one value per (head, code) (docs/hooks.md, "Pair codes").

Graphormer's edge encoding (attention-gym's `generate_graphormer_edge_bias`)
reads a path length and two edge types at (b, q, k) and gathers a per-head
weight for each type: three 32-bit reads and two dependent gathers on every
score, 4,384 B of spill traffic on fa_sm90 at D = 128 and ~43 TFLOP/s. Yet the
term takes few values: one per head and per distinct (length, type, type).
The launcher encodes each pair's integers as a code (mixed radix over their
ranges in the data, or their distinct tuples where that is too wide), evaluates
the term with torch once per (head, code) into a table, and the hooks read

    table[h, codes[b, q, k]]

where `codes` is a 16-bit pair read that kernels stage through shared memory
(cubridge.lower.pair_reads). The expression tree of the plan keeps the term
(the CuIR and the host checks read the spec's own semantics); only the CUDA
hooks read the code, as with distance tables.

A term qualifies when it reads b, q and k only inside two or more integer reads
at the same (rows..., k, constants...), at least one of them used as an index of
another aux read (a gather: what makes the term costly per score), and nothing
of the score. A problem whose reads take more than 2^15 distinct tuples cannot
be coded in 16 bits; `PairCode.build` says so, naming the tensors.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.pair_reads import aligned_pair_rows
from cubridge.transfer.block_table import DerivedCache
from cubridge.transfer.expr import (
    SCORE_VAR,
    DType,
    Node,
    aux_reads,
    const,
    free_vars,
    substitute,
    var,
)
from cubridge.transfer.torch_render import grid_function

CODE_DTYPE = torch.int16
MAX_CODES = 2 ** 15  # codes 0 .. 2^15 - 1: non-negative int16
TABLE_DTYPES = {DType.FLOAT: torch.float32, DType.INT: torch.int32}
_ROW_VARS = {"b", "h", "q"}


def _key_position(n: Node) -> int | None:
    """Where the key sits in an integer read at (rows..., k, constants...), the rows
    of (b, h, q) with q among them; None for any other read."""
    if n.op != "aux_load" or n.dtype != DType.INT:
        return None
    at = [i for i, a in enumerate(n.args) if a.op == "var" and a.arg == "k"]
    if len(at) != 1:
        return None
    rows, trail = n.args[:at[0]], n.args[at[0] + 1:]
    row_vars = set().union(*(free_vars(a) for a in rows)) if rows else set()
    if "q" not in row_vars or not row_vars <= _ROW_VARS:
        return None
    if not all(a.op == "const" and a.dtype == DType.INT for a in trail):
        return None
    return at[0]


def _components(term: Node) -> list[Node] | None:
    """The integer pair reads `term` depends on, or None where it reads b, q, k or
    the score anywhere else."""
    found: list[Node] = []

    def visit(n: Node) -> bool:
        if _key_position(n) is not None:
            if n not in found:
                found.append(n)
            return True
        if n.op == "var":
            return n.arg == "h"
        return all(visit(a) for a in n.args)

    return found if visit(term) else None


def _gathers(term: Node, components: list[Node]) -> bool:
    """Whether a component is an index of another aux read of the term."""
    comps = set(components)

    def reaches(n: Node) -> bool:
        return n in comps or (n.op == "cast" and reaches(n.args[0]))

    return any(n.op == "aux_load" and n not in comps and any(reaches(a) for a in n.args)
               for n in term.walk())


def _qualifies(term: Node) -> list[Node] | None:
    if term.dtype not in TABLE_DTYPES or SCORE_VAR in free_vars(term):
        return None
    comps = _components(term)
    if not comps or len(comps) < 2:
        return None
    rows = {n.args[:_key_position(n)] for n in comps}  # type: ignore[misc]
    if len(rows) != 1 or not _gathers(term, comps):
        return None
    return comps


@dataclass(frozen=True, eq=False)
class PairCode:
    """One coded term: aux `codes` holds each pair's code at [rows..., k], aux
    `table` the term at [h, code] (one row where the term does not read h).
    Compared by identity, like DistanceTable (it keys the cache)."""

    codes: str
    table: str
    term: Node
    components: tuple[Node, ...]

    @property
    def rows(self) -> tuple[Node, ...]:
        first = self.components[0]
        return first.args[:_key_position(first)]

    @property
    def by_head(self) -> bool:
        return "h" in free_vars(self.term)

    @property
    def table_dtype(self) -> torch.dtype:
        return TABLE_DTYPES[self.term.dtype]

    def read(self) -> Node:
        """The term as the hooks read it: table[h, codes[rows..., k]]."""
        code = Node("aux_load", DType.INT, (*self.rows, var("k")), self.codes)
        return Node("aux_load", self.term.dtype, (var("h") if self.by_head else const(0), code),
                    self.table)

    @functools.cached_property
    def aux_names(self) -> tuple[str, ...]:
        """The aux tensors the term reads."""
        return tuple(sorted(aux_reads(self.term)))

    def build(self, aux: Mapping[str, torch.Tensor], hq: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, table) for one problem's aux tensors (cached per tensors)."""
        missing = [n for n in self.aux_names if n not in aux]
        if missing:
            raise KeyError(f"{self.codes} (score_mod's term {self.term!r}) reads aux {missing}, "
                           f"not given (got {sorted(aux)})")
        reads = {n: aux[n] for n in self.aux_names}
        return CODES.get((self, hq, str(device)), reads,
                         lambda: self._aligned(*self._build(reads, hq, device)))

    @staticmethod
    def _aligned(codes: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return aligned_pair_rows(codes), table  # (staged 16 bytes at a time: aligned once)

    def _values(self, n: Node, aux: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """A component's values over its tensor's (rows..., k), as int64."""
        t = aux[str(n.arg)]
        at = _key_position(n)
        assert at is not None
        if t.dim() != len(n.args):
            raise ValueError(f"aux {n.arg!r} has rank {t.dim()}, read as {n!r}")
        trail = tuple(int(a.arg) for a in n.args[at + 1:])  # type: ignore[call-overload]
        try:
            return t[(slice(None),) * (at + 1) + trail].to(torch.int64)
        except IndexError as e:
            raise ValueError(f"aux {n.arg!r} of shape {tuple(t.shape)} is read as {n!r}: "
                             f"{e}") from None

    def _build(self, aux: Mapping[str, torch.Tensor], hq: int,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        aux = {n: t.to(device) for n, t in aux.items()}
        values = [self._values(n, aux) for n in self.components]
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) != 1:
            raise ValueError(f"score_mod's reads {list(self.components)} are coded together "
                             f"per pair, but their tensors' (rows, keys) differ: "
                             f"{sorted(shapes)}")
        stacked = torch.stack([v.reshape(-1) for v in values], dim=1)  # [pairs, components]
        if stacked.shape[0] == 0:
            return (torch.zeros(*next(iter(shapes)), dtype=CODE_DTYPE, device=device),
                    torch.zeros(hq if self.by_head else 1, 1, dtype=self.table_dtype,
                                device=device))
        lo, hi = stacked.min(dim=0).values, stacked.max(dim=0).values
        radix = (hi - lo + 1).tolist()
        if math.prod(radix) <= MAX_CODES:
            # mixed radix over the data's ranges: every tuple of the ranges has a code
            strides = [math.prod(radix[i + 1:]) for i in range(len(radix))]
            codes = ((stacked - lo) * torch.tensor(strides, device=device)).sum(dim=1)
            grid = torch.arange(math.prod(radix), device=device)
            tuples = torch.stack([lo[i] + (grid // strides[i]) % radix[i]
                                  for i in range(len(radix))], dim=1)
            try:
                table = self._table(_columns(tuples), aux, hq, len(grid), device)
            except (IndexError, RuntimeError):
                table = None  # a tuple the data never holds reads out of range
            if table is not None:
                return codes.view(next(iter(shapes))).to(CODE_DTYPE), table
        tuples, inverse = torch.unique(stacked, dim=0, return_inverse=True)
        if tuples.shape[0] > MAX_CODES:
            names = sorted({str(n.arg) for n in self.components})
            raise ValueError(
                f"aux {names}: score_mod's reads {list(self.components)} take "
                f"{tuples.shape[0]} distinct value tuples over the pairs, more than the "
                f"{MAX_CODES} a 16-bit pair code holds (docs/hooks.md, \"Pair codes\")")
        try:
            table = self._table(_columns(tuples), aux, hq, tuples.shape[0], device)
        except (IndexError, RuntimeError) as e:
            raise ValueError(f"score_mod's term {self.term!r} fails on the values its reads "
                             f"hold: {e}") from None
        return inverse.view(next(iter(shapes))).to(CODE_DTYPE), table

    def _table(self, columns: Mapping[str, torch.Tensor], aux: Mapping[str, torch.Tensor],
               hq: int, n: int, device: torch.device) -> torch.Tensor:
        """The term at every (head, tuple): [rows, n]."""
        rows = hq if self.by_head else 1
        values = _tuple_function(self)(
            torch.tensor(0, device=device), torch.arange(rows, device=device).view(-1, 1),
            torch.arange(n, device=device).view(1, -1), torch.tensor(0, device=device),
            **columns, **aux)
        return torch.as_tensor(values, device=device).to(self.table_dtype).expand(
            rows, n).contiguous()


def _columns(tuples: torch.Tensor) -> dict[str, torch.Tensor]:
    return {f"__pair_code_{i}": tuples[:, i] for i in range(tuples.shape[1])}


@functools.lru_cache(maxsize=16)
def _tuple_function(code: PairCode):
    """The term as a torch function of (h, tuple index), each component read
    replaced by a read of its column of the tuples at the index (passed as q)."""
    return grid_function(substitute(code.term, {
        n: Node("aux_load", DType.INT, (var("q"),), f"__pair_code_{i}")
        for i, n in enumerate(code.components)}))


def pair_code(score: Node | None, names: tuple[str, str] = ("__pair_codes", "__pair_code_table")
              ) -> PairCode | None:
    """score_mod's largest term worth coding per pair, or None."""
    if score is None:
        return None

    def visit(n: Node) -> PairCode | None:
        comps = _qualifies(n)
        if comps:
            return PairCode(names[0], names[1], n, tuple(comps))
        for a in n.args:
            found = visit(a)
            if found:
                return found
        return None

    return visit(score)


def coded_score(score: Node, code: PairCode) -> Node:
    """score_mod's tree with the coded term read from its table."""
    return substitute(score, {code.term: code.read()})


# (codes, table) per problem and aux tensors, reused while they are unmodified.
CODES: DerivedCache[tuple[torch.Tensor, torch.Tensor]] = DerivedCache(capacity=8)
