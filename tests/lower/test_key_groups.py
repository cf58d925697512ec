"""Key groups (cubridge/lower/key_groups.py): which masks read the key only through its
aligned group k // G, and that such a mask is the same on every key of a group. The
header's claim is checked against mask_mod for every pair by the host harness
(hook_harness.inc: the random_blocks test variant), fa_sm90's build in
tests/kernels/test_fa_sm90_compile.py."""

from __future__ import annotations

import pytest
import torch

from cubridge.lower.key_groups import key_group, render_key_group
from cubridge.transfer.trace import trace_mask_mod

TABLE = torch.rand(4, 40, 40, generator=torch.Generator().manual_seed(0)) < 0.2

WITH = {
    "bigbird_64": (lambda b, h, q, k, *, t: ((q // 64 - k // 64).abs() <= 1) | (k // 64 == 0) |
                   t[h, q // 64, k // 64], 64),
    "mixed_divisors": (lambda b, h, q, k: (k // 32 <= q // 32) & (k // 128 >= q // 128 - 1), 32),
    "blockwise_causal": (lambda b, h, q, k: k // 16 <= q // 16, 16),
}
WITHOUT = {
    "causal": lambda b, h, q, k: q >= k,
    "a_plain_key_beside": lambda b, h, q, k: (k // 64 <= q // 64) & (k < 100),
    "small_groups": lambda b, h, q, k: k // 4 <= q // 4,
    "not_a_power_of_two": lambda b, h, q, k: k // 48 <= q // 48,
    "an_offset_group": lambda b, h, q, k: (k + 3) // 64 <= q // 64,
    "no_key": lambda b, h, q, k: q < 100,
}


def _node(fn):
    return trace_mask_mod(fn, {"t": TABLE}).node


@pytest.mark.parametrize("name", sorted(WITH))
def test_the_mask_is_the_same_on_every_key_of_a_group(name):
    fn, g = WITH[name]
    assert key_group(_node(fn)) == g
    q = torch.arange(1200).view(-1, 1)
    k = torch.arange(1200).view(1, -1)
    for h in range(2):
        hh = torch.tensor(h)
        kw = {"t": TABLE} if "t" in fn.__code__.co_varnames else {}
        assert torch.equal(fn(0, hh, q, k, **kw), fn(0, hh, q, k - k % g, **kw)), (name, h)


@pytest.mark.parametrize("name", sorted(WITHOUT))
def test_other_masks_have_no_key_group(name):
    assert key_group(_node(WITHOUT[name])) == 0


def test_the_header_states_the_group():
    assert "constexpr int kKeyGroup = 64;" in render_key_group(_node(WITH["bigbird_64"][0]))
    assert "constexpr int kKeyGroup = 0;" in render_key_group(None)
