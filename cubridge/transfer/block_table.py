"""Block tables for data-dependent masks (document ids, share_question...).

When a mask reads aux tensors element by element, interval arithmetic cannot
tell which tiles are empty. Instead the mask is evaluated on the whole
(q, k) grid on the host side, per batch and head (or once, when the mask
depends on neither), and reduced per tile of block_m x block_n into:

- `kinds`: uint8 [Bt, Ht, num_q_blocks, num_k_blocks], BlockKind values;
- `ranges`: int32 [Bt, Ht, num_q_blocks, 2], the [lo, hi) key blocks that are
  not EMPTY for each query block (lo = hi = 0 when all are).

Bt is B or 1 and Ht is Hq or 1. Only in-bounds pairs count (a tail tile is
FULL if all of its in-bounds pairs are allowed). The generated block_kind and
kv_block_range read them as aux tensors. Tables are cached per (mask, shape,
block sizes, aux contents).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from cubridge.attention import Shape
from cubridge.ir.hooks import BlockKind

# aux names of the two tables in the hook manifest
KINDS_AUX = "__cubridge_block_kinds"
RANGES_AUX = "__cubridge_kv_ranges"

T = TypeVar("T")


@dataclass(frozen=True)
class BlockTable:
    kinds: torch.Tensor  # uint8 [Bt, Ht, nq, nk]
    ranges: torch.Tensor  # int32 [Bt, Ht, nq, 2]
    block_m: int
    block_n: int

    def as_aux(self) -> dict[str, torch.Tensor]:
        """The tables as the aux tensors the generated hooks read."""
        return {KINDS_AUX: self.kinds, RANGES_AUX: self.ranges}


# Grid chunk: at most this many mask elements are materialised at once.
_CHUNK_ELEMENTS = 1 << 25


def _kinds_of(allowed: torch.Tensor, block_m: int, block_n: int) -> torch.Tensor:
    """Reduce a bool grid [Bt, Ht, rows, Sk] to tile kinds [Bt, Ht, rows/bm, nk]."""
    bt, ht, rows, sk = allowed.shape
    nq, nk = -(-rows // block_m), -(-sk // block_n)
    pad = (0, nk * block_n - sk, 0, nq * block_m - rows)
    # out-of-bounds pairs neither make a tile non-EMPTY nor non-FULL
    any_allowed = torch.nn.functional.pad(allowed, pad, value=False)
    all_allowed = torch.nn.functional.pad(allowed, pad, value=True)
    tiles = (bt, ht, nq, block_m, nk, block_n)
    some = any_allowed.reshape(tiles).any(dim=5).any(dim=3)
    every = all_allowed.reshape(tiles).all(dim=5).all(dim=3)
    # torch.where, not masked assignment: no device sync on a GPU
    kinds = torch.where(every, int(BlockKind.FULL),
                        torch.where(some, int(BlockKind.PARTIAL), int(BlockKind.EMPTY)))
    return kinds.to(torch.uint8)


def _ranges_of(kinds: torch.Tensor) -> torch.Tensor:
    """[lo, hi) of the non-EMPTY key blocks per query block."""
    nk = kinds.shape[-1]
    live = kinds != int(BlockKind.EMPTY)
    cols = torch.arange(nk, device=kinds.device, dtype=torch.int32)
    lo = torch.where(live, cols, nk).amin(dim=-1)
    hi = torch.where(live, cols + 1, 0).amax(dim=-1)
    empty_row = ~live.any(dim=-1)
    lo = torch.where(empty_row, 0, lo)
    hi = torch.where(empty_row, 0, hi)
    return torch.stack([lo, hi], dim=-1).to(torch.int32)


def build_block_table(mask_mod: Callable[..., torch.Tensor], shape: Shape, block_m: int,
                      block_n: int, aux: Mapping[str, torch.Tensor], *,
                      depends_on_b: bool = True, depends_on_h: bool = True,
                      device: torch.device | str | None = None) -> BlockTable:
    """Evaluate `mask_mod(b, h, q_idx, kv_idx, **aux)` on the grid and reduce it per tile.

    `aux` holds the keyword arguments the mod takes (already selected)."""
    if block_m <= 0 or block_n <= 0:
        raise ValueError(f"block sizes must be positive, got {block_m} x {block_n}")
    if device is None:
        device = next((t.device for t in aux.values()), torch.device("cpu"))
    bt = shape.b if depends_on_b else 1
    ht = shape.hq if depends_on_h else 1
    b = torch.arange(bt, device=device).view(bt, 1, 1, 1)
    h = torch.arange(ht, device=device).view(1, ht, 1, 1)
    k = torch.arange(shape.sk, device=device).view(1, 1, 1, shape.sk)
    rows_per_chunk = max(block_m, (_CHUNK_ELEMENTS // max(1, bt * ht * shape.sk))
                         // block_m * block_m)
    parts = []
    for q0 in range(0, shape.sq, rows_per_chunk):
        q1 = min(shape.sq, q0 + rows_per_chunk)
        q = torch.arange(q0, q1, device=device).view(1, 1, q1 - q0, 1)
        allowed = mask_mod(b, h, q, k, **aux)
        if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
            got = allowed.dtype if isinstance(allowed, torch.Tensor) else type(allowed).__name__
            raise TypeError(f"mask_mod returned {got}, not a bool tensor")
        allowed = allowed.expand(bt, ht, q1 - q0, shape.sk)
        parts.append(_kinds_of(allowed, block_m, block_n))
    kinds = torch.cat(parts, dim=2).contiguous()
    return BlockTable(kinds, _ranges_of(kinds).contiguous(), block_m, block_n)


@dataclass
class _Entry(Generic[T]):
    tensors: dict[str, torch.Tensor]  # the aux it was built from (kept alive)
    versions: dict[str, int]  # their version counters then (bumped by in-place writes)
    copies: dict[str, torch.Tensor]  # CPU copies, to recognise equal contents
    value: T


def _same_tensors(entry: _Entry, aux: Mapping[str, torch.Tensor]) -> bool:
    """The very tensors, unmodified: no device sync needed. Holding them keeps
    their memory from being reused by other tensors."""
    return all(t is entry.tensors[n] and t._version == entry.versions[n] for n, t in aux.items())


def _same_contents(entry: _Entry, aux: Mapping[str, torch.Tensor]) -> bool:
    """Equal values (CPU tensors only: comparing on a GPU would synchronise)."""
    return all(t.device.type == "cpu" and torch.equal(entry.copies[n], t)
               for n, t in aux.items())


class DerivedCache(Generic[T]):
    """Values derived from aux tensors (block tables, distance tables), keyed by
    the caller's key plus the aux dtypes, shapes and devices; an entry is reused
    for the same unmodified aux tensors, or for CPU tensors of equal contents."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._entries: dict[tuple, _Entry[T]] = {}
        self.builds = 0

    def get(self, key: tuple, aux: Mapping[str, torch.Tensor], build: Callable[[], T]) -> T:
        sig = tuple((n, t.dtype, tuple(t.shape), str(t.device)) for n, t in sorted(aux.items()))
        key = (*key, sig)
        hit = self._entries.get(key)
        if hit is not None and (_same_tensors(hit, aux) or _same_contents(hit, aux)):
            return hit.value
        value = build()
        self.builds += 1
        self._entries.pop(key, None)
        self._entries[key] = _Entry(
            dict(aux), {n: t._version for n, t in aux.items()},
            {n: t.detach().clone() for n, t in aux.items() if t.device.type == "cpu"}, value)
        while len(self._entries) > self.capacity:
            self._entries.pop(next(iter(self._entries)))
        return value


class BlockTableCache(DerivedCache[BlockTable]):
    """Block tables keyed by (mask, shape, block sizes, aux dtypes and shapes)."""

    def get(self, mask_mod: Callable[..., torch.Tensor], shape: Shape,  # type: ignore[override]
            block_m: int, block_n: int, aux: Mapping[str, torch.Tensor],
            **kwargs: object) -> BlockTable:
        key = (mask_mod, shape, block_m, block_n, tuple(sorted(kwargs.items())))
        return super().get(key, aux, lambda: build_block_table(
            mask_mod, shape, block_m, block_n, aux, **kwargs))  # type: ignore[arg-type]


# The process-wide cache (the only global state: a cache).
TABLE_CACHE = BlockTableCache()
