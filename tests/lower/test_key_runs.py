"""Key runs of staged masks (cubridge/lower/key_runs.py): which masks split into
index intervals and a value part that reads the key only through staged values.
The header's C++ form is checked against mask_mod for every pair by the host harness
(hook_harness.inc, tests/lower/test_hooks_compiled.py), and on the GPU by the hooks
tests (fa_sm90 masks blocks of few runs by it)."""

from __future__ import annotations

import torch

from cubridge.lower.key_runs import key_runs, render_key_runs
from cubridge.lower.row_interval import NO_LOWER, NO_UPPER
from cubridge.transfer.expr import Node, free_vars
from cubridge.transfer.torch_render import grid_function
from cubridge.transfer.trace import trace_mask_mod

DOC = torch.tensor([0] * 5 + [1] * 7 + [2] * 4, dtype=torch.int64)
SEG = torch.tensor([0] * 4 + [1] * 6 + [0] * 2 + [2] * 4, dtype=torch.int64)


def _node(mask_mod) -> Node:
    return trace_mask_mod(mask_mod, {}).node


def _grid(n: Node) -> torch.Tensor:
    q = torch.arange(16).view(-1, 1)
    k = torch.arange(16).view(1, -1)
    return torch.as_tensor(grid_function(n)(0, 0, q, k, DOC=DOC)).expand(16, 16)


def _value_keys(n: Node) -> bool:
    """Whether the value part names the key anywhere but inside an aux read."""
    def outside(x: Node) -> bool:
        if x.op == "aux_load":
            return False
        return (x.op == "var" and x.arg == "k") or any(outside(a) for a in x.args)
    return outside(n)


def test_document_mask_is_causal_intervals_and_a_document_test():
    mask = _node(lambda b, h, q, k: (q >= k) & (DOC[q] == DOC[k]))
    form = key_runs(mask)
    assert form is not None and len(form.intervals) == 1
    (iv,) = form.intervals
    assert iv.lower == () and len(iv.upper) == 1  # key <= q
    assert "k" in free_vars(form.value) and not _value_keys(form.value)
    # the two parts together are the mask
    q = torch.arange(16).view(-1, 1)
    k = torch.arange(16).view(1, -1)
    assert torch.equal(_grid(mask), (k <= q) & _grid(form.value))


def test_segment_mask_keeps_its_disjunction_in_the_value_part():
    form = key_runs(_node(lambda b, h, q, k: (q >= k) & ((SEG[k] == 0) | (SEG[q] == SEG[k]))))
    assert form is not None and form.value.op in ("or", "bitor")


def test_a_value_part_alone_has_one_unbounded_interval():
    form = key_runs(_node(lambda b, h, q, k: DOC[q] == DOC[k]))
    assert form is not None and len(form.intervals) == 1
    assert form.intervals[0].lower == () and form.intervals[0].upper == ()
    text = render_key_runs(_node(lambda b, h, q, k: DOC[q] == DOC[k]), {}, {})
    assert f"KeyInterval{{{NO_LOWER}, {NO_UPPER}}}" in text


def test_masks_without_the_form_get_none():
    no_staged = _node(lambda b, h, q, k: q >= k)
    mixed = _node(lambda b, h, q, k: DOC[k] + k > q)  # the key's index and its value at once
    no_intervals = _node(lambda b, h, q, k: ((q - k) % 2 == 0) & (DOC[q] == DOC[k]))
    union = _node(lambda b, h, q, k: (q >= k) | (DOC[q] == DOC[k]))  # (not a conjunction)
    for mask in (no_staged, mixed, no_intervals, union, None):
        assert key_runs(mask) is None
    text = render_key_runs(no_staged, {}, {})
    assert "constexpr int kRunIntervals = 0;" in text and "return true;" in text


def test_the_header_form_reads_staged_values():
    text = render_key_runs(_node(lambda b, h, q, k: (q >= k) & (DOC[q] == DOC[k])),
                           {"DOC": 0}, {"DOC": torch.int64})
    assert "#define CUBRIDGE_HOOKS_KEY_RUNS 1" in text
    assert "constexpr int kRunIntervals = 1;" in text
    body = text.split("key_value_mask", 1)[1]
    assert "key_vals[0]" in body and "row_vals[0]" in body and "aux_load" not in body
