"""kernels/fast_divide.py: the (multiplier, shift) pairs fa_sm90's schedule divides by
(kernels/common/fast_divide.cuh computes the same as `divide`)."""

from __future__ import annotations

import random

import pytest

from cubridge.kernels.fast_divide import LIMIT, divide, fast_divisor


def _numerators(d: int, rng: random.Random) -> list[int]:
    near = [0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, LIMIT - 1, LIMIT - 2, LIMIT // d * d]
    return [n for n in near + [rng.randrange(LIMIT) for _ in range(200)] if 0 <= n < LIMIT]


@pytest.mark.parametrize("divisors", [
    range(1, 2049),                                   # every schedule-sized divisor
    [1 << k for k in range(31)],                      # powers of two (multiplier 1)
    [(1 << k) - 1 for k in range(2, 32)] + [(1 << k) + 1 for k in range(1, 31)],
    random.Random(7).sample(range(2049, LIMIT), 500),
], ids=["small", "powers", "around-powers", "random"])
def test_quotients_are_exact_below_two_to_the_31(divisors):
    rng = random.Random(11)
    for d in divisors:
        div = fast_divisor(d)
        assert 0 < div.mul < 1 << 32 and div.shift <= 31
        for n in _numerators(d, rng):
            assert divide(n, div) == n // d, (n, d)


def test_every_numerator_of_a_schedule_divisor():
    # tile_at divides tile indices by section * query blocks (here 4 heads x 33 blocks)
    div = fast_divisor(4 * 33)
    assert all(divide(n, div) == n // 132 for n in range(1 << 20))


@pytest.mark.parametrize("d", [0, -3, LIMIT])
def test_a_divisor_out_of_range_is_refused(d):
    with pytest.raises(ValueError, match="out of range"):
        fast_divisor(d)
