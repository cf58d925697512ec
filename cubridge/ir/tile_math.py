"""Tile math: what a worker computes on register tiles (torch tensors).

Register tiles are ordinary torch tensors of at most 2 dims ([rows, cols] or
[rows]); these helpers name the operations a kernel performs on them, so that
each maps to a CUDA idiom (a warp-shuffle row reduction, `exp2f`, a
conversion). Python arithmetic operators and `torch.where`/`torch.maximum`
on such tiles are tile math too. Nothing here synchronises or touches memory.
"""

from __future__ import annotations

import math

import torch

LOG2E = math.log2(math.e)
"""log2(e): softmax runs in base 2 (`exp2((s - m) * LOG2E)`), as kernels do with `exp2f`."""

LN2 = math.log(2.0)
"""ln(2), to turn base-2 logarithms back into natural ones."""


def full(shape: tuple[int, ...], value: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A register tile of `shape` filled with `value` (fp32 unless `dtype` says otherwise)."""
    return torch.full(shape, value, dtype=dtype)


def iota(start: int, n: int) -> torch.Tensor:
    """Integer positions start, start+1, ..., start+n-1 as an int64 tensor [n]
    (row or column indices of a tile: use `[:, None]` / `[None, :]` to broadcast)."""
    return torch.arange(start, start + n, dtype=torch.int64)


def row_max(x: torch.Tensor) -> torch.Tensor:
    """Max over the last dim: [M, N] -> [M] (fp32; -inf for an all -inf row)."""
    return x.amax(dim=-1)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim: [M, N] -> [M], accumulated in fp32."""
    return x.sum(dim=-1, dtype=torch.float32)


def exp2(x: torch.Tensor) -> torch.Tensor:
    """Elementwise 2**x (fp32); exp2(-inf) = 0."""
    return torch.exp2(x)


def log(x: torch.Tensor) -> torch.Tensor:
    """Elementwise natural logarithm (fp32); log(0) = -inf."""
    return torch.log(x)


def log2(x: torch.Tensor) -> torch.Tensor:
    """Elementwise base-2 logarithm (fp32); log2(0) = -inf."""
    return torch.log2(x)


def maximum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise max of two broadcastable tiles."""
    return torch.maximum(a, b)


def where(cond: torch.Tensor, a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor:
    """Elementwise select: `a` where `cond` is true, else `b` (broadcasting)."""
    return torch.where(cond, a, b)


def convert(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round a register tile to `dtype` (round to nearest even), e.g. fp32 P to
    bf16 before it is an MMA operand, or fp32 O to the output dtype before a store."""
    return x.to(dtype)
