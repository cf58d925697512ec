"""Host side of kernels/common/fast_divide.cuh: the (multiplier, shift) pair that
divides by a launch-time constant on the GPU with a multiply-high, an add and a shift."""

from __future__ import annotations

import ctypes

LIMIT = 1 << 31  # numerators and divisors below this divide exactly


class FastDivisor(ctypes.Structure):
    """Mirrors cubridge::FastDivisor."""

    _fields_ = [("mul", ctypes.c_uint32), ("shift", ctypes.c_uint32)]


def fast_divisor(d: int) -> FastDivisor:
    """The pair for divisor d (1 <= d < 2^31)."""
    if not 1 <= d < LIMIT:
        raise ValueError(f"fast divisor {d} out of range [1, 2^31)")
    shift = (d - 1).bit_length()  # ceil(log2 d)
    mul = ((1 << 32) * ((1 << shift) - d)) // d + 1
    return FastDivisor(mul, shift)


def divide(n: int, div: FastDivisor) -> int:
    """What the GPU computes for n / d (0 <= n < 2^31): for tests and models."""
    return ((n * div.mul >> 32) + n) >> div.shift
