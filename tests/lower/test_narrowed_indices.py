"""Which integer pair reads the launcher packs as int16 indices, how the header
reads them, and the packing itself. That the hooks compute the spec with them
is checked for examples/specs/graph_spatial_bias.py by the host harness
(test_hooks_compiled.py) and on the GPU (test_hooks_gpu.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hook_variants import make_spec

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.lower.narrowed_indices import MAX_INDEXED, NARROWED
from cubridge.spec import load
from cubridge.transfer.hooks import plan_from_json, plan_hooks

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "specs" / "graph_spatial_bias.py"
SHAPE = Shape(2, 4, 2, 300, 310, 64)


def _narrowed(score, aux, aux_shapes):
    spec = dataclasses.replace(make_spec("n", None, score), aux_shapes=aux_shapes)
    return [n.name for n in generate_header(plan_hooks(spec, aux)).narrowed]


def _ids(dtype=torch.int32):
    return torch.randint(0, 7, (2, 8, 8), dtype=dtype)


def test_an_integer_pair_read_used_only_as_an_index_is_narrowed():
    table = torch.randn(4, 7)
    shapes = {"d": ("B", "Sq", "Sk"), "t": ("Hq", 7)}
    for dtype in (torch.int32, torch.int64):
        assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k]],
                         {"d": _ids(dtype), "t": table}, shapes) == ["d"]
    # through an integer cast, and read twice at the same place
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k].long()]
                     * t[0, d[b, q, k]], {"d": _ids(), "t": table}, shapes) == ["d"]


def test_reads_whose_values_matter_beyond_an_index_stay_wide():
    table = torch.randn(4, 7)
    shapes = {"d": ("B", "Sq", "Sk"), "t": ("Hq", 7)}
    aux = {"d": _ids(), "t": table}
    # the value itself in arithmetic or a comparison
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k]] / d[b, q, k],
                     aux, shapes) == []
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k] + 1], aux, shapes) == []
    # an index into a dimension whose size a problem sets, or too large for int16
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k]], aux,
                     {"d": ("B", "Sq", "Sk"), "t": ("Hq", "Sk")}) == []
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k]], aux, None) == []
    big = {"d": _ids(), "t": torch.randn(4, MAX_INDEXED + 1)}
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k]], big,
                     {"d": ("B", "Sq", "Sk"), "t": ("Hq", MAX_INDEXED + 1)}) == []
    # not a pair read (the key not last), or read at two places
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, k, q]], aux, shapes) == []
    assert _narrowed(lambda s, b, h, q, k, *, d, t: s + t[h, d[b, q, k]] + t[h, d[0, q, k]],
                     aux, shapes) == []


def test_the_header_stages_the_narrowed_read_as_a_sixteen_bit_pair():
    header = generate_header(plan_hooks(load(EXAMPLE)))
    assert [(s.name, s.dtype) for s in header.slots] == [("distance", torch.int16),
                                                         ("spatial_bias", torch.float32)]
    assert header.pair_slots == (0,)
    assert header.manifest()["aux"][0]["narrowed"] is True
    text = header.text
    assert "constexpr int kPairReads = 1;" in text
    paired = text[text.index("float score_mod_paired("):text.index("bool mask_mod(")]
    assert "static_cast<int16_t>(pair)" in paired and "aux_load_c<int16_t" not in paired
    plain = text[text.index("float score_mod("):text.index("float score_mod_paired(")]
    assert "aux_load_c<int16_t, 3>(aux, 0, b, q, k)" in plain


def test_pack_narrows_once_per_tensor_and_holds_the_tables_to_their_sizes():
    spec = load(EXAMPLE)
    header = generate_header(plan_hooks(spec))
    aux = spec.make_aux(SHAPE, torch.Generator().manual_seed(0), "cpu")
    distance, _ = header.pack_aux(aux, SHAPE, "cpu")
    assert distance.dtype == torch.int16 and torch.equal(distance.int(), aux["distance"])
    assert distance.stride() == (300 * 312, 312, 1)  # rows aligned for 16-byte copies
    builds = NARROWED.builds
    assert header.pack_aux(aux, SHAPE, "cpu")[0] is distance and NARROWED.builds == builds
    aux["distance"][1, 2, 3] = 5  # an in-place write: packed again
    again = header.pack_aux(aux, SHAPE, "cpu")[0]
    assert again is not distance and int(again[1, 2, 3]) == 5
    with pytest.raises(ValueError, match="40000 entries in dim 1.*'distance' as int16"):
        header.pack_aux({**aux, "spatial_bias": torch.randn(4, 40000)}, SHAPE, "cpu")
    with pytest.raises(ValueError, match="narrowed from int32 or int64; got torch.float32"):
        header.pack_aux({**aux, "distance": aux["distance"].float()}, SHAPE, "cpu")


def test_the_plan_keeps_its_fixed_sizes_through_json():
    spec = load(EXAMPLE)
    plan = plan_hooks(spec)
    assert plan.fixed_dims == {"spatial_bias": (None, 7)}
    again = plan_from_json(plan.to_json(), spec)
    assert again.fixed_dims == plan.fixed_dims
    assert generate_header(again).text == generate_header(plan).text
