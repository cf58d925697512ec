"""Memory: the three spaces, tiles in them, and the access tracking that
turns unsynchronised accesses into hazards.

A `Tile` is a view of a buffer allocated in SMEM or RMEM (optionally with
pipeline stages); a `GlobalTile` is a box of a GMEM tensor (out-of-bounds rows
read as zeros and are dropped on store, as TMA and predicated copies do).

Every SMEM stage tracks, per row range, its last writes and reads with the
vector-clock epoch of the worker that made them. An access by another worker
that is not ordered after them (through a barrier the worker waited on) is a
hazard. This is how a missing wait on a full barrier and an overwrite of a
stage that its consumer has not released are caught, whatever the policy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from cubridge.ir.errors import HazardError, ProgramError, SourceLoc

if TYPE_CHECKING:
    from cubridge.ir.scheduler import AsyncOp, Worker


class Space(enum.Enum):
    """Where a buffer lives: global memory, shared memory (per CTA) or registers
    (per worker)."""

    GMEM = "gmem"
    SMEM = "smem"
    RMEM = "rmem"


GMEM, SMEM, RMEM = Space.GMEM, Space.SMEM, Space.RMEM


@dataclass
class Access:
    worker: Worker
    epoch: int  # the worker's own clock when it accessed
    sync_epoch: int  # the worker's bar.sync count when it accessed
    lo: int
    hi: int
    loc: SourceLoc
    # written per-thread (cp.async, st.shared): other warps see it only after a sync
    needs_sync: bool = False


@dataclass
class Region:
    """One stage of a buffer: the bookkeeping behind its hazards."""

    writes: list[Access] = field(default_factory=list)
    reads: list[Access] = field(default_factory=list)
    pending: list[tuple[int, int, AsyncOp]] = field(default_factory=list)  # writes in flight
    inflight_reads: list[tuple[int, int, AsyncOp]] = field(default_factory=list)


def _overlaps(lo: int, hi: int, a: int, b: int) -> bool:
    return lo < b and a < hi


def _covered(lo: int, hi: int, spans: list[tuple[int, int]]) -> bool:
    """Do the row ranges `spans` cover [lo, hi)?"""
    at = lo
    for a, b in sorted(spans):
        if a > at:
            break
        at = max(at, b)
    return at >= hi


class Buffer:
    """An allocation: `stages` copies of a tile of `shape` and `dtype` in one space."""

    def __init__(self, name: str, space: Space, shape: tuple[int, ...], dtype: torch.dtype,
                 stages: int | None, owner: Worker | None, loc: SourceLoc):
        self.name = name
        self.space = space
        self.shape = shape
        self.dtype = dtype
        self.stages = stages
        self.owner = owner
        self.loc = loc
        full = (stages, *shape) if stages is not None else shape
        # Uninitialised memory is NaN (or a sentinel for integers) so that reads
        # of data never written poison the result.
        if dtype.is_floating_point:
            self.data = torch.full(full, float("nan"), dtype=dtype)
        else:
            self.data = torch.full(full, -(2**30), dtype=dtype)
        self.regions = [Region() for _ in range(stages if stages is not None else 1)]

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def tile(self) -> Tile:
        return Tile(self, None, 0, self.shape[0] if self.shape else 1)


class Tile:
    """A view of a buffer: a whole (unstaged) buffer, one stage, or a row range
    and/or column range of either. `tile[s]` selects stage s of a staged buffer;
    `tile.rows(r0, n)` selects rows r0..r0+n-1 of the first tile dimension and
    `tile.cols(c0, n)` columns c0..c0+n-1 of the last. Attributes: `shape`
    (of one stage), `dtype`, `space`, `nbytes` (bytes of this view, what a
    copy of it transfers). Programs never touch a tile's data directly: they
    move it with copy / copy_async / load / store and compute on it with gemm."""

    def __init__(self, buffer: Buffer, stage: int | None, row0: int, nrows: int,
                 col0: int = 0, ncols: int | None = None):
        self.buffer = buffer
        self.stage = stage
        self.row0 = row0
        self.nrows = nrows
        self.col0 = col0
        self.ncols = ncols  # None: every column of the last dimension

    def __getitem__(self, stage: int) -> Tile:
        b = self.buffer
        if b.stages is None:
            raise ProgramError(f"{self} has no stages; index rows with .rows(start, count)")
        if self.stage is not None:
            raise ProgramError(f"{self} is already one stage")
        if not isinstance(stage, int) or not 0 <= stage < b.stages:
            raise ProgramError(f"stage {stage!r} out of range for {b.name} with {b.stages} "
                               "stages")
        return Tile(b, stage, self.row0, self.nrows, self.col0, self.ncols)

    def rows(self, start: int, count: int) -> Tile:
        """Rows start..start+count-1 of this view (e.g. one consumer's share of a
        Q tile); hazards are tracked per row range, so disjoint row ranges
        written by different workers do not conflict."""
        if start < 0 or count <= 0 or start + count > self.nrows:
            raise ProgramError(f"rows({start}, {count}) out of range for {self} "
                               f"with {self.nrows} rows")
        return Tile(self.buffer, self.stage, self.row0 + start, count, self.col0, self.ncols)

    def cols(self, start: int, count: int) -> Tile:
        """Columns start..start+count-1 of the last dimension of this view (e.g.
        one half of the head dim of a Q or K tile, as differential attention or
        MLA's rotary part read it). A gemm takes such a view as an operand (a
        k-range of the product). Hazards are tracked per row range: a column
        view conflicts with every access to its rows."""
        if len(self.buffer.shape) < 2:
            raise ProgramError(f"cols() needs a tile with at least two dimensions; {self} has "
                               f"shape {self.shape}")
        width = self.shape[-1]
        if start < 0 or count <= 0 or start + count > width:
            raise ProgramError(f"cols({start}, {count}) out of range for {self} "
                               f"with {width} columns")
        return Tile(self.buffer, self.stage, self.row0, self.nrows, self.col0 + start, count)

    @property
    def partial_cols(self) -> bool:
        """Whether the view covers only some columns (its writes cover no row whole)."""
        return self.ncols is not None and self.ncols != self.buffer.shape[-1]

    @property
    def space(self) -> Space:
        return self.buffer.space

    @property
    def dtype(self) -> torch.dtype:
        return self.buffer.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        rest = self.buffer.shape[1:]
        if self.ncols is not None and rest:
            rest = (*rest[:-1], self.ncols)
        return (self.nrows, *rest)

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.buffer.data.element_size()

    def _staged(self) -> bool:
        return self.buffer.stages is not None and self.stage is None

    def view(self) -> torch.Tensor:
        """The tensor behind the tile (executor use only: no hazard checks)."""
        d = self.buffer.data
        if self.stage is not None:
            d = d[self.stage]
        if self.buffer.stages is not None and self.stage is None:
            d = d[:, self.row0:self.row0 + self.nrows]
        else:
            d = d[self.row0:self.row0 + self.nrows]
        if self.ncols is not None:
            d = d[..., self.col0:self.col0 + self.ncols]
        return d

    def spans(self) -> list[Region]:
        if self.stage is not None:
            return [self.buffer.regions[self.stage]]
        return list(self.buffer.regions)

    def __repr__(self) -> str:
        s = self.buffer.name
        if self.stage is not None:
            s += f"[{self.stage}]"
        if self.nrows != (self.buffer.shape[0] if self.buffer.shape else 1) or self.row0:
            s += f".rows({self.row0}, {self.nrows})"
        if self.partial_cols:
            s += f".cols({self.col0}, {self.ncols})"
        return s

    __str__ = __repr__


# -- hazard checks ------------------------------------------------------------------------


def check_owner(tile: Tile, w: Worker, loc: SourceLoc) -> None:
    if tile.space is RMEM and tile.buffer.owner is not w:
        owner = tile.buffer.owner.name if tile.buffer.owner else "run()"
        raise ProgramError(f"{tile} is in registers of {owner}; {w.name} cannot touch it",
                           loc=loc, worker=w.name)


def _check_in_flight(reg: Region, tile: Tile, w: Worker, loc: SourceLoc, action: str,
                     copy_hint: str) -> None:
    """Raise if an async copy or gemm_async still in flight touches `tile`'s rows."""
    lo, hi = tile.row0, tile.row0 + tile.nrows
    for a, b, op in reg.pending:
        if _overlaps(lo, hi, a, b):
            hint = "missing wait_group" if op.what.startswith("gemm_async") else copy_hint
            raise HazardError(f"{action} {tile} while {op.what} issued at {op.loc} by "
                              f"{op.worker.name} is still in flight ({hint})",
                              loc=loc, worker=w.name)


def check_read(tile: Tile, w: Worker, loc: SourceLoc, what: str) -> None:
    """Raise if `w` may not read `tile` now."""
    check_owner(tile, w, loc)
    lo, hi = tile.row0, tile.row0 + tile.nrows
    for reg in tile.spans():
        _check_in_flight(reg, tile, w, loc, f"{what} reads",
                         "wait on its barrier (or copy_wait) first")
        if tile.space is SMEM and not _covered(lo, hi, [(a.lo, a.hi) for a in reg.writes]):
            raise HazardError(f"{what} reads {tile}, which nothing has written yet (a wait "
                              "that returned too early, or a missing load)", loc=loc,
                              worker=w.name)
        for acc in reg.writes:
            if not _overlaps(lo, hi, acc.lo, acc.hi):
                continue
            if not w.knows(acc.worker, acc.epoch):
                raise HazardError(
                    f"{what} reads {tile}, written at {acc.loc} by {acc.worker.name}, without "
                    "synchronising with that write (missing or wrong-phase wait on the barrier "
                    "that signals it)", loc=loc, worker=w.name)
            if (acc.worker is w and acc.needs_sync and w.warps > 1
                    and acc.sync_epoch == w.sync_epoch):
                raise HazardError(
                    f"{what} reads {tile}, written per-thread at {acc.loc}, with no sync_threads "
                    "in between: other warps' part of the tile is not visible yet",
                    loc=loc, worker=w.name)


def record_read(tile: Tile, w: Worker, loc: SourceLoc) -> None:
    if tile.space is not SMEM:
        return
    lo, hi = tile.row0, tile.row0 + tile.nrows
    for reg in tile.spans():
        reg.reads = [r for r in reg.reads
                     if not (r.worker is w and lo <= r.lo and r.hi <= hi)]
        reg.reads.append(Access(w, w.epoch, w.sync_epoch, lo, hi, loc))


def check_write(tile: Tile, w: Worker, loc: SourceLoc, what: str) -> None:
    """Raise if `w` may not overwrite `tile` now."""
    check_owner(tile, w, loc)
    lo, hi = tile.row0, tile.row0 + tile.nrows
    for reg in tile.spans():
        _check_in_flight(reg, tile, w, loc, f"{what} overwrites", "it has not landed")
        for a, b, op in reg.inflight_reads:
            if _overlaps(lo, hi, a, b):
                raise HazardError(
                    f"{what} overwrites {tile} while {op.what} issued at {op.loc} by "
                    f"{op.worker.name} may still read it (release only after wait_group)",
                    loc=loc, worker=w.name)
        for acc in reg.reads:
            if not _overlaps(lo, hi, acc.lo, acc.hi):
                continue
            if not w.knows(acc.worker, acc.epoch):
                raise HazardError(
                    f"{what} overwrites {tile} before its reader released it: read at {acc.loc} "
                    f"by {acc.worker.name} is not ordered before this write (missing or "
                    "wrong-phase wait on the stage's empty barrier)", loc=loc, worker=w.name)
            if acc.worker is w and w.warps > 1 and acc.sync_epoch == w.sync_epoch:
                raise HazardError(
                    f"{what} overwrites {tile}, read at {acc.loc}, with no sync_threads in "
                    "between: other warps of the role may still be reading it",
                    loc=loc, worker=w.name)
        for acc in reg.writes:
            if _overlaps(lo, hi, acc.lo, acc.hi) and not w.knows(acc.worker, acc.epoch):
                raise HazardError(
                    f"{what} overwrites {tile}, written at {acc.loc} by {acc.worker.name}, "
                    "with no synchronisation between the two writes", loc=loc, worker=w.name)


def record_write(tile: Tile, w: Worker, loc: SourceLoc, *, needs_sync: bool) -> None:
    if tile.space is not SMEM:
        return
    lo, hi = tile.row0, tile.row0 + tile.nrows
    for reg in tile.spans():
        if not tile.partial_cols:  # a write of some columns leaves the rows' other writes
            reg.writes = [a for a in reg.writes if not (lo <= a.lo and a.hi <= hi)]
            reg.reads = [a for a in reg.reads if not (lo <= a.lo and a.hi <= hi)]
        reg.writes.append(Access(w, w.epoch, w.sync_epoch, lo, hi, loc, needs_sync))


def mark_pending(tile: Tile, op: AsyncOp, *, reading: bool = False) -> None:
    lo, hi = tile.row0, tile.row0 + tile.nrows
    for reg in tile.spans():
        (reg.inflight_reads if reading else reg.pending).append((lo, hi, op))


def clear_pending(tile: Tile, op: AsyncOp, *, reading: bool = False) -> None:
    for reg in tile.spans():
        if reading:
            reg.inflight_reads = [p for p in reg.inflight_reads if p[2] is not op]
        else:
            reg.pending = [p for p in reg.pending if p[2] is not op]


# -- global memory ------------------------------------------------------------------------


class Global:
    """A tensor in global memory. Programs reach it only through `tile()`
    boxes moved by copy primitives, never as a whole tensor."""

    def __init__(self, name: str, data: torch.Tensor):
        self.name = name
        self._data = data
        self.writes: list[tuple[tuple[int, ...], int, int, str, SourceLoc]] = []

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self._data.dtype

    def tile(self, *index: int, start: int, rows: int) -> GlobalTile:
        """The box `tensor[*index, start:start+rows, ...]`: `index` fixes the
        leading dimensions, the next one is the row dimension, the rest are
        taken whole. Rows past the end read as zero and are not written."""
        nd = self._data.dim()
        if len(index) >= nd:
            raise ProgramError(f"{self.name}.tile: {len(index)} leading indices for a "
                               f"{nd}-d tensor leave no row dimension")
        for i, (ix, n) in enumerate(zip(index, self._data.shape, strict=False)):
            if not 0 <= int(ix) < n:
                raise ProgramError(f"{self.name}.tile: index {ix} out of range for dim {i} "
                                   f"of size {n}")
        if start < 0 or rows <= 0:
            raise ProgramError(f"{self.name}.tile: start={start}, rows={rows} must be >= 0 "
                               "and > 0")
        return GlobalTile(self, tuple(int(i) for i in index), start, rows)


class GlobalTile:
    """A box of a Global: leading index, then `rows` rows from `start`; its
    `shape` is (rows, *trailing dims), `nbytes` counts every row (including
    rows past the end, as TMA transaction bytes do)."""

    space = GMEM

    def __init__(self, g: Global, index: tuple[int, ...], start: int, rows: int):
        self.g = g
        self.index = index
        self.start = start
        self.nrows = rows

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.nrows, *self.g.shape[len(self.index) + 1:])

    @property
    def dtype(self) -> torch.dtype:
        return self.g.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.g._data.element_size()

    def _inside(self) -> tuple[torch.Tensor, int]:
        plane = self.g._data[self.index]
        end = min(self.start + self.nrows, plane.shape[0])
        return plane[self.start:end] if end > self.start else plane[:0], max(end - self.start, 0)

    def read(self) -> torch.Tensor:
        inside, n = self._inside()
        out = torch.zeros(self.shape, dtype=self.dtype)
        out[:n] = inside
        return out

    def write(self, value: torch.Tensor, worker: str, loc: SourceLoc) -> None:
        inside, n = self._inside()
        inside.copy_(value[:n])
        self.g.writes.append((self.index, self.start, self.start + n, worker, loc))

    def __repr__(self) -> str:
        idx = ", ".join(str(i) for i in self.index)
        return f"{self.g.name}[{idx}, {self.start}:{self.start + self.nrows}]"
