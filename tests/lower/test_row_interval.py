"""Row intervals of index-only masks (cubridge/lower/row_interval.py): which masks
have them, and that their union allows exactly the mask's keys, row by row. The
header's C++ form is checked against mask_mod for every pair by the host harness
(hook_harness.inc, tests/lower/test_hooks_compiled.py)."""

from __future__ import annotations

import pytest
import torch

from cubridge.lower.row_interval import (
    MAX_INTERVALS,
    NO_LOWER,
    NO_UPPER,
    render_row_interval,
    row_intervals,
)
from cubridge.transfer.expr import Node
from cubridge.transfer.torch_render import grid_function
from cubridge.transfer.trace import trace_mask_mod


def _node(mask_mod) -> Node:
    return trace_mask_mod(mask_mod, {}).node


def _bounds(nodes: tuple[Node, ...], fold, empty: int, q: torch.Tensor, h: int = 0
            ) -> torch.Tensor:
    out = torch.full_like(q, empty)
    for n in nodes:
        value = grid_function(n)(0, torch.tensor(h), q, 0)
        out = fold(out, torch.as_tensor(value).expand_as(q))
    return out


def _allowed(intervals, h: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[q, k] pairs the intervals (or key sets) allow at head h."""
    got = torch.zeros(q.shape[0], k.shape[1], dtype=torch.bool)
    for iv in intervals:
        lo = _bounds(iv.lower, torch.maximum, NO_LOWER, q, h)
        hi = _bounds(iv.upper, torch.minimum, NO_UPPER, q, h)
        ok = torch.ones_like(q, dtype=torch.bool)
        for g in iv.guards:
            ok = ok & torch.as_tensor(grid_function(g)(0, torch.tensor(h), q, 0)).expand_as(q)
        keep = ok & (lo <= k) & (k <= hi)
        if iv.period > 1:
            phase = torch.as_tensor(grid_function(iv.phase)(0, torch.tensor(h), q, 0))
            keep = keep & ((k - phase.expand_as(q)) % iv.period < iv.width)
        got = got | keep
    return got


WITH_INTERVAL = {
    "causal": lambda b, h, q, k: q >= k,
    "sliding_window": lambda b, h, q, k: (q >= k) & (q - k < 100),
    "band": lambda b, h, q, k: (k - q <= 7) & (q - k <= 9),
    "written_backwards": lambda b, h, q, k: (k <= q) & (k > q - 50) & (k >= 3),
    "offsets": lambda b, h, q, k: (q + 3 - k > 0) & (-k + q < 40),
    "equal": lambda b, h, q, k: k == q // 2,
    "row_condition": lambda b, h, q, k: (q >= k) & (q < 150),
    # unions of two
    "global_plus_window": lambda b, h, q, k: (q >= k) & ((q - k < 64) | (k < 8)),
    "prefix_lm": lambda b, h, q, k: (q >= k) | (k < 37),
    "band_or_tail": lambda b, h, q, k: ((q - k <= 5) & (k - q <= 5)) | (k >= 290),
    "row_dependent_union": lambda b, h, q, k: ((k <= q) & (q < 100)) | ((k >= q) & (q >= 200)),
    # key-free choices of one interval (per head, per row)
    "window_per_head_parity": lambda b, h, q, k: (q >= k) & torch.where(
        h % 2 == 1, q - k < 50, q - k < 7),
    "choice_per_row_with_guards": lambda b, h, q, k: torch.where(
        q < 150, (q - k < 20) & (k <= q) & (q > 10), (k > 100) & (k < q + h)),
    "choice_inside_a_union": lambda b, h, q, k: (k < 4) | torch.where(
        h == 2, (q >= k) & (q - k < 30), q == k),
    # negations pushed in (De Morgan, integer comparisons flipped)
    "negated_window": lambda b, h, q, k: ~((k > q) | (q - k >= 50)),
    "negated_window_or_diagonal": lambda b, h, q, k: torch.logical_not(
        (k > q) | (q - k >= 50)) | (q == k),
    "negated_conjunction": lambda b, h, q, k: ~((k < q - 20) & (k >= 5)) & (k <= q),
    # a choice by the key between intervals: (c & a) | (~c & b)
    "sinks_by_where": lambda b, h, q, k: torch.where(k < 4, k <= q, (q - k >= 0) & (q - k < 40)),
    # floor quotients of the key bound it (any positive divisor, either sign)
    "blockwise": lambda b, h, q, k: k // 16 <= q // 16,
    "same_block": lambda b, h, q, k: (q // 64 == k // 64) & (k <= q),
    "quotients_of_offsets": lambda b, h, q, k: ((k + 5) // 12 > q // 12 - 3) &
    ((q - k) // 7 >= -2),
    # conjunctions past MAX_INTERVALS whose row conditions exclude each other: a choice
    "prompt_then_frames": lambda b, h, q, k: (k < 90) & ((q < 90) & (k <= q) | (q >= 90)) | (
        (k >= 90) & (q >= 90) & ((k - 90) // 32 <= (q - 90) // 32)),
    "three_pieces_by_row": lambda b, h, q, k: ((q < 100) & (k <= q)) | ((q >= 100) & (k < 10)) | (
        (q >= 100) & (q - k < 20) & (k <= q)),
    "negated_row_condition": lambda b, h, q, k: ((q - k < 7) & (k <= q) & ~(q > 150)) | (
        (k < 5) & (q > 150)) | ((q > 150) & (k >= q - 30) & (k <= q)),
    "strict_quotient_bounds": lambda b, h, q, k: ((k - q) // 3 < 4) & (q // 10 < (k + 1) // 10),
    # |x| against a key-free bound: a two-sided window, or the two sides it leaves
    "abs_window": lambda b, h, q, k: (q - k).abs() <= 40,
    "abs_builtin_strict_flipped": lambda b, h, q, k: 25 > abs(k - q + 3),
    "abs_window_per_head": lambda b, h, q, k: torch.abs(q - k) < 10 * h + 5,
    "abs_negative_bound": lambda b, h, q, k: (q - k).abs() <= h - 2,  # (empty at h < 2)
    "abs_outside_band": lambda b, h, q, k: (q - k).abs() >= 30,
    "abs_outside_any_bound": lambda b, h, q, k: (k - q).abs() > h - 2,  # (every key at h < 2)
    "abs_negated": lambda b, h, q, k: ~((q - k).abs() > 16) & (k <= q),
}
WITHOUT = {
    "three_pieces": lambda b, h, q, k: (k < 8) | ((q - k < 64) & (q >= k)) | (k > 280),
    "union_with_a_gap": lambda b, h, q, k: (q >= k) & ((q - k < 64) | ((k % 16) == 0)),
    "dilated": lambda b, h, q, k: (q >= k) & ((q - k) % 2 == 0),
    "two_keys": lambda b, h, q, k: 2 * k <= q,  # (a key coefficient other than +-1)
    "scaled": lambda b, h, q, k: 2 * q - 2 * k + 1 > 0,  # (an interval, not recognised)
    "not_equal": lambda b, h, q, k: k != q,
    "choice_of_a_union": lambda b, h, q, k: torch.where(h % 2 == 1, (k < 8) | (k > 280), q >= k),
    "choice_by_the_key": lambda b, h, q, k: torch.where(k % 2 == 1, q >= k, q - k < 9),
    "choice_by_the_key_of_unions": lambda b, h, q, k: torch.where(k < 4, (k < 2) | (k > 3),
                                                                  (q >= k) | (k > 280)),
    "negated_equal": lambda b, h, q, k: ~(k == q),
    # three pieces whose row conditions do not exclude each other
    "three_pieces_overlapping_rows": lambda b, h, q, k: ((q < 200) & (k <= q)) | (
        (q >= 100) & (k < 10)) | ((q >= 150) & (q - k < 20) & (k <= q)),
    "abs_window_with_two_more": lambda b, h, q, k: ((q - k).abs() <= 40) | (q < 8) | (k < 8),
    "abs_of_a_key_sum": lambda b, h, q, k: (q + k).abs() <= 40 * k,  # (a key-dependent bound)
}


@pytest.mark.parametrize("name", sorted(WITH_INTERVAL))
def test_the_intervals_allow_exactly_the_masks_keys(name):
    mask_mod = WITH_INTERVAL[name]
    intervals = row_intervals(_node(mask_mod))
    assert intervals is not None and 1 <= len(intervals) <= MAX_INTERVALS, name
    q = torch.arange(300).view(-1, 1)
    k = torch.arange(300).view(1, -1)
    for h in range(4):
        assert all(iv.period == 1 for iv in intervals)
        got = _allowed(intervals, h, q, k)
        want = mask_mod(0, torch.tensor(h), q, k)
        assert torch.equal(got, want.expand_as(got)), (name, h)


@pytest.mark.parametrize("name", sorted(WITHOUT))
def test_masks_without_a_few_intervals_per_row_get_none(name):
    assert row_intervals(_node(WITHOUT[name])) is None


def test_aux_reading_masks_get_none():
    table = torch.zeros(300, dtype=torch.int64)
    assert row_intervals(_node(lambda b, h, q, k: (q >= k) & (table[k] == table[q]))) is None


def test_the_header_says_how_many_intervals_it_has():
    one = render_row_interval(_node(WITH_INTERVAL["sliding_window"]), {}, {})
    assert "constexpr int kRowIntervals = 1;" in one
    assert "#define CUBRIDGE_HOOKS_ROW_INTERVALS 1" in one
    two = render_row_interval(_node(WITH_INTERVAL["global_plus_window"]), {}, {})
    assert "constexpr int kRowIntervals = 2;" in two
    assert "if (i == 0) {" in two
    no = render_row_interval(_node(WITHOUT["dilated"]), {}, {})
    assert "constexpr int kRowIntervals = 0;" in no
    assert "KeyInterval{0, -1}" in no
    assert "constexpr int kRowIntervals = 0;" in render_row_interval(None, {}, {})


# Key sets (periods=True): an interval may keep one residue modulo a constant, or a range
# of residues modulo a power of two
WITH_KEY_SETS = {
    "dilated": lambda b, h, q, k: (q >= k) & ((q - k) % 2 == 0),
    "strided": lambda b, h, q, k: (q - k >= 0) & ((q - k) % 128 == 0),
    "keys_ahead": lambda b, h, q, k: ((k - q + 3) % 4 == 1) & (k <= q + 50),
    "sum_of_indices": lambda b, h, q, k: ((q + k) % 16 == 0) & (k < 40),
    "residue_per_row": lambda b, h, q, k: (q >= k) & ((q - k) % 8 == q % 8),
    "residue_and_window": lambda b, h, q, k: (q - k < 300) & (k <= q) & ((k - q) % 32 == 5)
    | (k < 3),
    # ranges of residues (Sparse Transformer's "fixed" summary keys: k % 64 >= 56)
    "fixed_pattern": lambda b, h, q, k: (q >= k) & ((q // 64 == k // 64) | (k % 64 >= 56)),
    "band_each_period": lambda b, h, q, k: ((q - k) % 256 < 40) & (k <= q),
    "range_of_keys_ahead": lambda b, h, q, k: ((k - q + 3) % 16 > 10) & (k < q + 90),
    "range_written_backwards": lambda b, h, q, k: (5 >= (k + q) % 8) & (k > 7),
    "every_residue": lambda b, h, q, k: ((q - k) % 4 <= 3) & (k <= q),
    "chosen_phase": lambda b, h, q, k: torch.where(h % 2 == 1, (q - k) % 64 == 0,
                                                   (q - k) % 64 == 1) & (k <= q),
    "plain_intervals_too": lambda b, h, q, k: (q >= k) & (q - k < 100),
    # torch.fmod(d, 2^j) == 0 is d % 2^j == 0 for either sign of d (Sparse Transformer)
    "strided_by_fmod": lambda b, h, q, k: (q - k >= 0) & ((q - k < 64) |
                                                          (torch.fmod(q - k, 64) == 0)),
    "fmod_of_a_negative_offset": lambda b, h, q, k: (torch.fmod(k - q, 8) != 0).logical_not()
    & (k < q + 30),
    # periods that are not powers of two (one residue; fmod(x, P) == s: a residue and x's sign)
    "every_third_behind": lambda b, h, q, k: (q >= k) & ((q - k) % 3 == 0),
    "period_six": lambda b, h, q, k: (q >= k) & ((q - k) % 6 == 0),
    "seventh_keys_ahead": lambda b, h, q, k: ((k - q + 2) % 7 == 5) & (k <= q + 60),
    "period_24_of_a_sum": lambda b, h, q, k: ((q + k) % 24 == 7) & (k < 200),
    "odd_residue_per_row": lambda b, h, q, k: (q >= k) & ((q - k) % 7 == q % 7),
    "dilated_every_third": lambda b, h, q, k: (q - k >= 0) & ((q - k < 64) |
                                                              (q - k < 200) & ((q - k) % 3 == 0)),
    "fmod_band": lambda b, h, q, k: ((q - k).abs() < 100) & (
        (torch.fmod(k - q, 3) == 0) | (torch.fmod(k - q, 3) == 1)),
    "fmod_negative_residue": lambda b, h, q, k: (torch.fmod(k - q, 24) == -5) & (k >= q - 150),
    "fmod_residue_per_head": lambda b, h, q, k: torch.where(
        h % 2 == 1, torch.fmod(q - k, 7) == 2, torch.fmod(q - k, 7) == -5) & (k <= q + 30),
}
WITHOUT_KEY_SETS = {
    "range_of_an_odd_period": lambda b, h, q, k: ((q - k) % 3 < 2) & (k <= q),
    "period_past_two_to_the_15": lambda b, h, q, k: (q >= k) & ((q - k) % 32769 == 0),
    "fmod_of_two_periods": lambda b, h, q, k: (torch.fmod(q - k, 3) == 1) & (
        torch.fmod(q - k, 5) == 1),
    "two_residues": lambda b, h, q, k: ((q - k) % 2 == 0) & ((q - k) % 8 == 4),
    "scaled_key": lambda b, h, q, k: (2 * k) % 4 == 0,
    "not_equal": lambda b, h, q, k: (q - k) % 4 != 0,
    "range_against_a_row_value": lambda b, h, q, k: (q - k) % 64 < q % 64,
    "no_residue": lambda b, h, q, k: ((q - k) % 8 > 9) & (k <= q),
    "period_chosen_per_head": lambda b, h, q, k: torch.where(h % 2 == 1, (q - k) % 64 == 0,
                                                             q - k < 9),
}


@pytest.mark.parametrize("name", sorted(WITH_KEY_SETS))
def test_key_sets_allow_exactly_the_masks_keys(name):
    mask_mod = WITH_KEY_SETS[name]
    intervals = row_intervals(_node(mask_mod), periods=True)
    assert intervals is not None, name
    q = torch.arange(-20, 300).view(-1, 1)  # (negative rows: the phase's floor modulo)
    k = torch.arange(300).view(1, -1)
    for h in range(2):
        want = torch.as_tensor(mask_mod(0, torch.tensor(h), q, k)).expand(q.shape[0], 300)
        assert torch.equal(_allowed(intervals, h, q, k), want), (name, h)


@pytest.mark.parametrize("name", sorted(WITHOUT_KEY_SETS))
def test_masks_without_key_sets_get_none(name):
    assert row_intervals(_node(WITHOUT_KEY_SETS[name]), periods=True) is None


def test_a_range_of_residues_is_one_key_set_of_that_width():
    (iv,) = row_intervals(_node(WITH_KEY_SETS["band_each_period"]), periods=True)
    assert (iv.period, iv.width) == (256, 40)
    fixed = row_intervals(_node(WITH_KEY_SETS["fixed_pattern"]), periods=True)
    assert sorted((iv.period, iv.width) for iv in fixed) == [(1, 1), (64, 8)]
    (every,) = row_intervals(_node(WITH_KEY_SETS["every_residue"]), periods=True)
    assert every.period == 1  # (the atom holds for every key)


def test_plain_row_intervals_keep_no_residue():
    assert row_intervals(_node(WITH_KEY_SETS["dilated"])) is None
    assert all(iv.period == 1 for iv in row_intervals(_node(WITH_KEY_SETS["plain_intervals_too"])))


def test_a_residue_of_any_period_is_a_key_set_of_width_one():
    (iv,) = row_intervals(_node(WITH_KEY_SETS["every_third_behind"]), periods=True)
    assert (iv.period, iv.width) == (3, 1)
    band = row_intervals(_node(WITH_KEY_SETS["fmod_band"]), periods=True)
    assert sorted((iv.period, iv.width) for iv in band) == [(3, 1), (3, 1)]
    (behind,) = row_intervals(_node(WITH_KEY_SETS["fmod_negative_residue"]), periods=True)
    assert behind.period == 24 and behind.upper  # (fmod < 0 where k - q < 0: k <= q - 1)
