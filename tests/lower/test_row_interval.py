"""Row intervals of index-only masks (cubridge/lower/row_interval.py): which masks
have them, and that their union allows exactly the mask's keys, row by row. The
header's C++ form is checked against mask_mod for every pair by the host harness
(hook_harness.inc, tests/lower/test_hooks_compiled.py)."""

from __future__ import annotations

import pytest
import torch

from cubridge.attention import Shape
from cubridge.lower.row_interval import (
    MAX_INTERVALS,
    NO_LOWER,
    NO_UPPER,
    every_row_keeps_a_key,
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
    # past two conjunctions, one free of the key (rows that see every key) is a choice
    # inside each of the others: Longformer's window plus global tokens, two a row
    "longformer": lambda b, h, q, k: ((q - k).abs() <= 40) | (q < 8) | (k < 8),
    "longformer_global_rows_first": lambda b, h, q, k: (q < 8) | (k < 8) | (
        (q - k).abs() <= 40),
    "longformer_global_rows_last": lambda b, h, q, k: (k < 8) | ((q - k).abs() <= 40) | (q < 8),
    "longformer_causal": lambda b, h, q, k: (q >= k) & (((q - k).abs() <= 40) | (q < 8) | (
        k < 8)),
    "longformer_causal_after": lambda b, h, q, k: (((q - k).abs() <= 40) | (q < 8) | (k < 8)) & (
        k <= q),
    "longformer_global_rows_per_head": lambda b, h, q, k: ((q - k).abs() <= 40) | (q < 8 * h) | (
        k < 8),
    "longformer_global_rows_on_odd_heads": lambda b, h, q, k: ((q - k).abs() <= 40) | (
        (q < 8) & (h % 2 == 1)) | (k < 8),
    "global_rows_at_both_ends": lambda b, h, q, k: ((q - k).abs() <= 40) | (q < 8) | (
        q >= 290) | (k < 8),
    # (A | g) & (B | C): four conjunctions distributed, two with g folded in first
    "global_rows_before_distributing": lambda b, h, q, k: (((q - k).abs() <= 40) | (q < 8)) & (
        (k <= q) | (k < 8)),
    # integers x != y: its two sides x < y | x > y
    "not_equal": lambda b, h, q, k: k != q,
    "negated_equal": lambda b, h, q, k: ~(k == q),
    "block_diagonal_complement": lambda b, h, q, k: (q >= k) & (q // 64 != k // 64),
    "outside_a_signed_block": lambda b, h, q, k: (q - k) // 16 != -1,
    "unequal_to_a_row_value": lambda b, h, q, k: torch.ne(k, q // 2) & (k <= q),
    # shifts by a constant are floor quotients by 2^j (of either sign: arithmetic shifts)
    "shifted_blocks": lambda b, h, q, k: (q >> 6) == (k >> 6),
    "shifted_blocks_causal": lambda b, h, q, k: (k >> 5) <= (q >> 5),
    "shifted_offsets": lambda b, h, q, k: ((q - k) >> 5) == 0,
    "shifted_negative_offsets": lambda b, h, q, k: (((k - q) >> 4) >= -2) & (k <= q),
    "shifted_block_complement": lambda b, h, q, k: (q >= k) & ((q >> 6) != (k >> 6)),
}
WITHOUT = {
    "three_pieces": lambda b, h, q, k: (k < 8) | ((q - k < 64) & (q >= k)) | (k > 280),
    "union_with_a_gap": lambda b, h, q, k: (q >= k) & ((q - k < 64) | ((k % 16) == 0)),
    "dilated": lambda b, h, q, k: (q >= k) & ((q - k) % 2 == 0),
    "two_keys": lambda b, h, q, k: 2 * k <= q,  # (a key coefficient other than +-1)
    "scaled": lambda b, h, q, k: 2 * q - 2 * k + 1 > 0,  # (an interval, not recognised)
    "unequal_scaled_key": lambda b, h, q, k: 2 * k != q,
    "two_unequal": lambda b, h, q, k: (k != q) & (k != q - 5),  # (four intervals)
    "shift_by_a_traced_amount": lambda b, h, q, k: (k >> (h + 1)) == (q >> (h + 1)),
    "choice_of_a_union": lambda b, h, q, k: torch.where(h % 2 == 1, (k < 8) | (k > 280), q >= k),
    "choice_by_the_key": lambda b, h, q, k: torch.where(k % 2 == 1, q >= k, q - k < 9),
    "choice_by_the_key_of_unions": lambda b, h, q, k: torch.where(k < 4, (k < 2) | (k > 3),
                                                                  (q >= k) | (k > 280)),
    # three pieces whose row conditions do not exclude each other
    "three_pieces_overlapping_rows": lambda b, h, q, k: ((q < 200) & (k <= q)) | (
        (q >= 100) & (k < 10)) | ((q >= 150) & (q - k < 20) & (k <= q)),
    # three that depend on the key beside a key-free one
    "longformer_with_end_keys": lambda b, h, q, k: ((q - k).abs() <= 40) | (q < 8) | (k < 8) | (
        k >= 290),
    "global_rows_with_three_pieces": lambda b, h, q, k: (q < 8) | (
        (k < 8) | ((q - k < 64) & (q >= k)) | (k > 280)),
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


# (Sq, Sk): square, keys past the queries, queries past the keys (rows beyond Sk + W
# keep no key in a window of W), and the lengths around the masks' constants
PROOF_LENGTHS = [(300, 300), (120, 300), (300, 120), (165, 150), (166, 150), (40, 3), (9, 1)]


@pytest.mark.parametrize("name", sorted(WITH_INTERVAL))
def test_every_row_keeps_a_key_is_what_the_mask_allows(name):
    """The proof that skips a floor mask's pass after the kernel (cubridge.empty_rows):
    at each shape it says exactly whether every row allows a key, and for every shape
    (None) it says yes only where each shape does."""
    mask_mod = WITH_INTERVAL[name]
    node = _node(mask_mod)
    every = []
    for sq, sk in PROOF_LENGTHS:
        q, k = torch.arange(sq).view(-1, 1), torch.arange(sk).view(1, -1)
        want = all(bool(mask_mod(0, torch.tensor(h), q, k).expand(sq, sk).any(-1).all())
                   for h in range(4))
        assert every_row_keeps_a_key(node, Shape(1, 4, 1, sq, sk, 64)) == want, (sq, sk)
        every.append(want)
    if every_row_keeps_a_key(node):
        assert all(every), name


def test_every_row_keeps_a_key_is_proved_for_causal_masks_at_any_length():
    causal, window = _node(WITH_INTERVAL["causal"]), _node(lambda b, h, q, k: (
        q - k >= 0) & (q - k < 16))
    assert every_row_keeps_a_key(causal) and not every_row_keeps_a_key(window)
    assert every_row_keeps_a_key(window, Shape(1, 2, 1, 165, 150, 64))  # q <= Sk + 14
    assert not every_row_keeps_a_key(window, Shape(1, 2, 1, 166, 150, 64))
    # aux values are the call's: no proof
    cut = trace_mask_mod(lambda b, h, q, k, *, n: (q >= k) & (k < n),
                         {"n": torch.tensor(5)}).node
    assert not every_row_keeps_a_key(cut) and not every_row_keeps_a_key(
        cut, Shape(1, 2, 1, 10, 10, 64))


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
    # a residue's != is the other P - 1 residues (one key set, not two sides)
    "not_equal": lambda b, h, q, k: (q - k) % 4 != 0,
    "all_but_one_residue": lambda b, h, q, k: (q >= k) & (k % 4 != 3),
    "all_but_one_residue_or_the_diagonal": lambda b, h, q, k: (q >= k) & (
        (k % 4 != 3) | (k == q)),
    "unequal_to_a_constant_past_the_period": lambda b, h, q, k: ((q - k) % 8 != 9) & (k <= q),
    # masks of low bits are residues modulo 2^j (two's complement: of either sign)
    "parity_by_the_low_bit": lambda b, h, q, k: (q >= k) & ((k & 1) == 0),
    "odd_keys_by_the_low_bit": lambda b, h, q, k: ((k & 1) != 0) & (k <= q),
    "low_bits_of_a_negative_offset": lambda b, h, q, k: (((k - q) & 7) == 3) & (k < q + 40),
    "low_bits_unequal": lambda b, h, q, k: (q >= k) & ((15 & (q - k)) != 1),
    "range_of_low_bits": lambda b, h, q, k: (q >= k) & ((k & 63) >= 56),
    "sparse_fixed_in_bit_forms": lambda b, h, q, k: (q >= k) & (
        ((q >> 6) == (k >> 6)) | ((k & 63) >= 56)),
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
    "unequal_to_a_row_value": lambda b, h, q, k: (q - k) % 4 != q % 4,
    "not_a_mask_of_low_bits": lambda b, h, q, k: (q >= k) & ((k & 6) == 2),
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


def test_rows_that_see_every_key_have_the_whole_row_in_each_interval():
    """Longformer (|q - k| <= 40 | q < 8 | k < 8): rows q < 8 allow [0, Sk) in both
    intervals; the others their window and the global keys [0, 8)."""
    intervals = row_intervals(_node(WITH_INTERVAL["longformer"]))
    assert intervals is not None and len(intervals) == 2
    q = torch.arange(300)
    window, globals_ = ((_bounds(iv.lower, torch.maximum, NO_LOWER, q),
                         _bounds(iv.upper, torch.minimum, NO_UPPER, q)) for iv in intervals)
    for lo, hi in (window, globals_):
        assert (lo[:8] <= 0).all() and (hi[:8] >= 299).all()
    assert torch.equal(window[0][8:], q[8:] - 40) and torch.equal(window[1][8:], q[8:] + 40)
    assert (globals_[0][8:] <= 0).all() and (globals_[1][8:] == 7).all()
    assert all(not iv.guards for iv in intervals)
    text = render_row_interval(_node(WITH_INTERVAL["longformer"]), {}, {})
    assert "constexpr int kRowIntervals = 2;" in text and "(q < 8) ?" in text


def test_unequal_is_its_two_sides_and_block_diagonal_complement_two_intervals():
    """`q // 64 != k // 64` is `q // 64 < k // 64 | q // 64 > k // 64`: the keys past the
    query's block (none, under q >= k) and those before it."""
    mask = _node(WITH_INTERVAL["block_diagonal_complement"])
    assert len(row_intervals(mask)) == 2
    assert "constexpr int kRowIntervals = 2;" in render_row_interval(mask, {}, {})
    sides = _node(lambda b, h, q, k: (q >= k) & ((q // 64 < k // 64) | (q // 64 > k // 64)))
    assert row_intervals(mask) == row_intervals(sides)


def test_a_residues_unequal_is_one_key_set_of_all_but_one_residue():
    (iv,) = row_intervals(_node(WITH_KEY_SETS["all_but_one_residue"]), periods=True)
    assert (iv.period, iv.width) == (4, 3)
    (every,) = row_intervals(_node(WITH_KEY_SETS["unequal_to_a_constant_past_the_period"]),
                             periods=True)
    assert every.period == 1  # ((q - k) % 8 is never 9)


def test_shifts_and_masks_of_low_bits_have_the_intervals_of_their_floor_forms():
    """`x >> j` is `x // 2^j` and `x & (2^j - 1)` is `x % 2^j` (transfer/simplify.py): the
    same intervals and key sets as the masks written with // and %."""
    pairs = [
        (lambda b, h, q, k: (q >> 6) == (k >> 6), lambda b, h, q, k: q // 64 == k // 64),
        (lambda b, h, q, k: (q >= k) & ((q - k) >> 3 < 5), lambda b, h, q, k: (q >= k) & (
            (q - k) // 8 < 5)),
        (lambda b, h, q, k: (q >= k) & ((k & 1) == 0), lambda b, h, q, k: (q >= k) & (
            k % 2 == 0)),
        (lambda b, h, q, k: (q >= k) & (((q - k) & 127) == 0), lambda b, h, q, k: (q >= k) & (
            (q - k) % 128 == 0)),
    ]
    for bits, floors in pairs:
        assert row_intervals(_node(bits), periods=True) is not None
        assert row_intervals(_node(bits), periods=True) == row_intervals(_node(floors),
                                                                         periods=True)


def test_a_residue_of_any_period_is_a_key_set_of_width_one():
    (iv,) = row_intervals(_node(WITH_KEY_SETS["every_third_behind"]), periods=True)
    assert (iv.period, iv.width) == (3, 1)
    band = row_intervals(_node(WITH_KEY_SETS["fmod_band"]), periods=True)
    assert sorted((iv.period, iv.width) for iv in band) == [(3, 1), (3, 1)]
    (behind,) = row_intervals(_node(WITH_KEY_SETS["fmod_negative_residue"]), periods=True)
    assert behind.period == 24 and behind.upper  # (fmod < 0 where k - q < 0: k <= q - 1)
