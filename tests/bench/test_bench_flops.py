"""Allowed-pair counting against brute force: the denominator of every TFLOP/s."""

from __future__ import annotations

import itertools

import pytest
import torch
from bench_specs import causal_mask, document_mask, make_doc_ids

from cubridge.attention import Shape
from cubridge.bench.flops import band_pairs, count_allowed_pairs


def brute_force(mask_fn, shape: Shape, **aux) -> int:
    """One Python call per (b, h, q, k): slow, obviously right."""
    count = 0
    for b, h, q, k in itertools.product(range(shape.b), range(shape.hq), range(shape.sq),
                                        range(shape.sk)):
        t = lambda x: torch.tensor(x)
        count += bool(mask_fn(t(b), t(h), t(q), t(k), **aux))
    return count


def test_band_pairs_matches_enumeration():
    for sq, sk, lo, hi in [(7, 7, 0, 6), (7, 7, 0, 2), (5, 9, -3, 1), (9, 4, 2, 5), (6, 6, 3, 1)]:
        want = sum(lo <= q - k <= hi for q in range(sq) for k in range(sk))
        assert band_pairs(sq, sk, lo, hi) == want


def test_no_mask_counts_every_pair_and_is_full():
    shape = Shape(2, 4, 2, 13, 11, 16)
    stats = count_allowed_pairs(None, shape, "cpu")
    assert stats.allowed_pairs == 2 * 4 * 13 * 11
    assert stats.structure == "full" and stats.density == 1.0
    assert stats.flops == 4 * stats.allowed_pairs * 16


@pytest.mark.parametrize("sq,sk", [(9, 9), (7, 12), (12, 5)])
def test_causal_count_and_structure(sq, sk):
    shape = Shape(2, 3, 3, sq, sk, 8)
    stats = count_allowed_pairs(causal_mask, shape, "cpu", chunk_elements=40)  # many chunks
    assert stats.allowed_pairs == brute_force(causal_mask, shape)
    assert stats.structure == "causal"
    assert not stats.depends_on_batch and not stats.depends_on_head


def test_sliding_window_is_recognised_with_its_width():
    window = lambda b, h, q, k: (q >= k) & (q - k < 4)
    shape = Shape(1, 2, 1, 17, 17, 8)
    stats = count_allowed_pairs(window, shape, "cpu", chunk_elements=64)
    assert stats.allowed_pairs == brute_force(window, shape)
    assert stats.structure == "window4" and stats.window == 4


def test_prefix_lm_is_general_and_exact():
    prefix = lambda b, h, q, k: (q >= k) | (k < 5)
    shape = Shape(2, 2, 2, 16, 16, 8)
    stats = count_allowed_pairs(prefix, shape, "cpu", chunk_elements=100)
    assert stats.allowed_pairs == brute_force(prefix, shape)
    assert stats.structure == "general" and stats.window is None


@pytest.mark.slow
def test_document_mask_counts_each_batch_element():
    shape = Shape(3, 2, 1, 40, 40, 8)
    aux = make_doc_ids(shape, torch.Generator().manual_seed(3), "cpu")
    assert not torch.equal(aux["doc_ids"][0], aux["doc_ids"][1])  # documents differ per batch
    bound = lambda b, h, q, k: document_mask(b, h, q, k, doc_ids=aux["doc_ids"])
    stats = count_allowed_pairs(bound, shape, "cpu", chunk_elements=500)
    assert stats.allowed_pairs == brute_force(document_mask, shape, doc_ids=aux["doc_ids"])
    assert stats.depends_on_batch and not stats.depends_on_head
    assert stats.structure == "general"
    # Per document of length n: n (n + 1) / 2 causal pairs, times heads.
    want = 0
    for row in aux["doc_ids"]:
        for n in torch.unique_consecutive(row, return_counts=True)[1].tolist():
            want += n * (n + 1) // 2
    assert stats.allowed_pairs == want * shape.hq


def test_head_dependent_mask_counts_each_head():
    per_head = lambda b, h, q, k: (q >= k) & (q - k <= h)
    shape = Shape(1, 4, 2, 10, 10, 8)
    stats = count_allowed_pairs(per_head, shape, "cpu")
    assert stats.allowed_pairs == brute_force(per_head, shape)
    assert stats.depends_on_head and stats.structure == "general"


def test_mask_returning_non_bool_is_a_clear_error():
    with pytest.raises(TypeError, match="bool"):
        count_allowed_pairs(lambda b, h, q, k: q - k, Shape(1, 1, 1, 4, 4, 8), "cpu")
