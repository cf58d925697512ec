"""Mask tables (cubridge/lower/mask_tables.py): which masks are read from a [Sq, Sk]
table, the table the launcher builds, its cache and its bound, and the header's
read. That the hooks compute the mask with it is checked for the tree_mask test
variant by the host harness (test_hooks_compiled.py) and on the GPU
(test_hooks_gpu.py)."""

from __future__ import annotations

import pytest
import torch
from hook_variants import VARIANTS, make_spec

from cubridge.attention import Shape
from cubridge.lower import mask_tables
from cubridge.lower.hook_header import generate_header
from cubridge.transfer.hooks import plan_hooks
from cubridge.transfer.torch_render import grid_function

SHAPE = Shape(2, 4, 2, 70, 150, 64)


def _header(mask, aux):
    return generate_header(plan_hooks(make_spec("m", mask), aux))


def test_a_byte_read_at_a_key_offset_is_one_staged_table_read():
    header = generate_header(plan_hooks(VARIANTS["tree_mask"]))
    assert header.mask_table is not None
    slot = next(s for s in header.slots if s.source == "mask_table")
    assert (slot.dtype, slot.rank) == (torch.bool, 2) and header.pair_slots == (slot.slot,)
    text = header.text
    plain = text[text.index("bool mask_mod("):text.index("bool mask_mod_paired(")]
    assert f"return cubridge::aux_load<bool>(aux, {slot.slot}, q, k);" in plain
    assert "ancestors" not in plain and "constexpr int kMaskPairReads = 1;" in text
    # the plan keeps the mask: its block table still classifies from it
    assert header.plan.classification == "table"


def test_masks_with_index_structure_or_of_b_and_h_keep_their_form():
    s = 150
    aux = {"doc": torch.randint(0, 3, (s,), dtype=torch.int32),
           "off": torch.randint(0, 5, (4,), dtype=torch.int32),
           "byte": torch.rand(2, s, s) < 0.5, "row": torch.rand(s, 96) < 0.5}

    def tabled(mask):
        return _header(mask, aux).mask_table is not None

    assert not tabled(lambda b, h, q, k, *, doc: doc[q] == doc[k])  # key reads at k
    assert not tabled(lambda b, h, q, k, *, doc, off: k - off[doc[k]] <= q)  # via an aux read
    assert not tabled(lambda b, h, q, k, *, byte: byte[b, q, k])  # a pair read already
    assert not tabled(lambda b, h, q, k, *, row: row[q, (k // 2).clamp(0, 95)] & (h > 0))
    assert not tabled(lambda b, h, q, k: (q >= k) & (k % 3 == 0))  # index only
    assert tabled(lambda b, h, q, k, *, row: row[q, (k // 2).clamp(0, 95)] | (q < 8))


def test_the_table_is_the_mask_on_the_grid_and_is_built_once_per_tensors():
    spec = VARIANTS["tree_mask"]
    header = generate_header(plan_hooks(spec))
    aux = dict(spec.make_aux(SHAPE, torch.Generator().manual_seed(1), torch.device("cpu")))
    slot = next(s.slot for s in header.slots if s.source == "mask_table")
    table = header.pack_aux(aux, SHAPE, "cpu")[slot]
    q, k = torch.arange(SHAPE.sq).view(-1, 1), torch.arange(SHAPE.sk).view(1, -1)
    want = grid_function(header.plan.mask.node)(torch.tensor(0), torch.tensor(0), q, k, **aux)
    assert table.dtype == torch.bool and torch.equal(table, want.expand(SHAPE.sq, SHAPE.sk))
    assert table.stride() == (160, 1)  # rows aligned for 16-byte copies
    builds = mask_tables.TABLES.builds
    assert header.pack_aux(aux, SHAPE, "cpu")[slot] is table
    assert mask_tables.TABLES.builds == builds
    aux["ancestors"][3, 5] = ~aux["ancestors"][3, 5]  # an in-place write: built again
    again = header.pack_aux(aux, SHAPE, "cpu")[slot]
    assert mask_tables.TABLES.builds == builds + 1 and bool(again[3, 45]) == bool(
        aux["ancestors"][3, 5])


def test_a_problem_past_the_table_bound_says_so(monkeypatch):
    spec = VARIANTS["tree_mask"]
    header = generate_header(plan_hooks(spec))
    aux = dict(spec.make_aux(SHAPE, torch.Generator().manual_seed(1), torch.device("cpu")))
    monkeypatch.setattr(mask_tables, "MAX_TABLE_BYTES", 70 * 150 - 1)
    with pytest.raises(ValueError, match=r"70 x 150 bytes is past the 10499.*Mask tables"):
        header.pack_aux(aux, SHAPE, "cpu")
