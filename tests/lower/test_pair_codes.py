"""Pair codes (cubridge/lower/pair_codes.py): which score_mod terms are coded per
pair, the codes and tables the launcher builds, their cache, and the header's read.
That the hooks compute the spec with them is checked for
examples/specs/graph_edge_bias.py by the host harness (test_hooks_compiled.py) and
on the GPU (test_hooks_gpu.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hook_variants import make_spec

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.lower.pair_codes import CODES, MAX_CODES
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks
from cubridge.transfer.torch_render import grid_function

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
SHAPE = Shape(2, 4, 2, 70, 150, 64)


def _header(score, aux, aux_shapes=None):
    spec = dataclasses.replace(make_spec("c", None, score), aux_shapes=aux_shapes)
    return generate_header(plan_hooks(spec, aux))


def _aux(gen=None, types=4):
    gen = gen or torch.Generator().manual_seed(0)
    return {"n": torch.randint(0, 3, (2, 70, 150), generator=gen, dtype=torch.int32),
            "e": torch.randint(0, types, (2, 70, 150, 2), generator=gen, dtype=torch.int32),
            "w": torch.randn(4, 2, types, generator=gen)}


def _edge(s, b, h, q, k, *, n, e, w):
    length = n[b, q, k]
    hops = (torch.where(length > 0, w[h, 0, e[b, q, k, 0]], 0.0)
            + torch.where(length > 1, w[h, 1, e[b, q, k, 1]], 0.0))
    return s + hops / torch.clamp(length, min=1)


def _check_packed(header, aux, shape=SHAPE):
    """The header's read, table[h, codes[b, q, k]], equals the term on the grid."""
    slot = {s.source: s.slot for s in header.slots}
    packed = header.pack_aux(aux, shape, "cpu")
    codes, table = packed[slot["pair_codes"]], packed[slot["pair_code_table"]]
    b, h, q, k = (torch.arange(n).view(*([1] * i), -1, *([1] * (3 - i)))
                  for i, n in enumerate((shape.b, shape.hq, shape.sq, shape.sk)))
    want = grid_function(header.pair_code.term)(b, h, q, k, **aux)
    got = table[h if header.pair_code.by_head else 0, codes.long()[b, q, k]]
    assert torch.equal(got, want.expand_as(got).to(got.dtype))
    return codes, table


def test_reads_at_one_pair_that_gather_are_one_staged_code():
    header = _header(_edge, _aux())
    code = header.pair_code
    assert code is not None and code.by_head
    assert sorted(repr(c) for c in code.components) == [
        "aux_load[int]('e'; b, q, k, 0)", "aux_load[int]('e'; b, q, k, 1)",
        "aux_load[int]('n'; b, q, k)"]
    assert [(s.name, s.dtype, s.rank, s.source) for s in header.slots[3:]] == [
        ("__pair_codes", torch.int16, 3, "pair_codes"),
        ("__pair_code_table", torch.float32, 2, "pair_code_table")]
    assert header.pair_slots == (3,)  # the codes are the staged 16-bit pair read
    text = header.text
    plain = text[text.index("float score_mod("):text.index("float score_mod_paired(")]
    assert "aux_load_c<int32_t" not in plain  # no read of n or e per score
    assert "aux_load_c<float, 2>(aux, 4, h, static_cast<int>(cubridge::aux_load_c<int16_t, " \
           "3>(aux, 3, b, q, k)))" in plain
    paired = text[text.index("float score_mod_paired("):text.index("bool mask_mod(")]
    assert "static_cast<int16_t>(pair)" in paired and "aux_load_c<int16_t" not in paired


def test_terms_without_two_gathered_integer_reads_at_one_pair_are_not_coded():
    aux = {"a": torch.randint(0, 5, (2, 70, 150), dtype=torch.int32),
           "c": torch.randint(0, 5, (4, 70, 150), dtype=torch.int32),
           "f": torch.randn(2, 70, 150), "t": torch.randn(4, 5)}

    def coded(score):
        return _header(score, aux).pair_code

    # one integer read and its gather (narrowed_indices.py's case)
    assert coded(lambda s, b, h, q, k, *, a, t: s + t[h, a[b, q, k]]) is None
    # two integer reads without a gather, a float read, reads at other rows
    assert coded(lambda s, b, h, q, k, *, a: s + a[b, q, k] * a[b, q, k - 1]) is None
    assert coded(lambda s, b, h, q, k, *, a, f, t: s + t[h, a[b, q, k]] * f[b, q, k]) is None
    assert coded(lambda s, b, h, q, k, *, a, c, t: s + t[h, a[b, q, k]] + t[0, c[h, q, k]]) \
        is None
    # the score or q beside the reads: the largest term without them is coded
    aux2 = {**aux, "a2": torch.randint(0, 5, (2, 70, 150), dtype=torch.int32)}
    code = _header(lambda s, b, h, q, k, *, a, a2, t: s * 2.0 + t[h, a[b, q, k]]
                   * t[h, a2[b, q, k]] + q * 0.5, aux2).pair_code
    assert code is not None and code.term.op == "mul" and code.by_head
    assert {x.arg for x in code.term.walk() if x.op == "var"} == {"b", "h", "q", "k"}
    assert {x.arg for x in code.term.walk() if x.op == "aux_load"} == {"a", "a2", "t"}
    examples = {"graph_spatial_bias": None, "pair_bias": None, "relative_position": None,
                "graph_edge_bias": "add"}
    for name, op in examples.items():
        code = generate_header(plan_hooks(load(EXAMPLES / f"{name}.py"))).pair_code
        assert (code.term.op if code else None) == ("truediv" if op else None), name


def test_codes_and_table_reproduce_the_term_in_mixed_radix_and_by_distinct_tuples():
    header = _header(_edge, _aux())
    codes, table = _check_packed(header, _aux())
    assert codes.dtype == torch.int16 and table.shape == (4, 3 * 4 * 4)  # mixed radix
    assert codes.stride() == (70 * 152, 152, 1)  # rows aligned for 16-byte copies
    # types spread too far for the product of their ranges: their distinct tuples
    aux = _aux()
    aux["e"] = aux["e"] * 20000 // 3
    aux["w"] = torch.randn(4, 2, 20001)
    codes, table = _check_packed(header, aux)
    assert table.shape[1] == len(torch.unique(torch.stack(
        [aux["n"].flatten(), aux["e"][..., 0].flatten(), aux["e"][..., 1].flatten()]), dim=1).T)


def test_a_problem_with_more_tuples_than_sixteen_bits_hold_says_so():
    header = _header(lambda s, b, h, q, k, *, a, c, t: s + t[h, a[b, q, k]] * t[h, c[b, q, k]],
                     {"a": torch.zeros(1, 300, 300, dtype=torch.int64),
                      "c": torch.zeros(1, 300, 300, dtype=torch.int64),
                      "t": torch.randn(4, 300 * 300)})
    a = torch.arange(300 * 300).view(1, 300, 300)
    shape = Shape(1, 4, 4, 300, 300, 64)
    with pytest.raises(ValueError, match=rf"aux \['a', 'c'\].*90000 distinct.*{MAX_CODES}"):
        header.pack_aux({"a": a, "c": a.flip(-1), "t": torch.randn(4, 300 * 300)}, shape, "cpu")


def test_codes_are_built_once_per_tensors_and_again_after_a_write():
    header = _header(_edge, _aux())
    aux = _aux()
    first = header.pack_aux(aux, SHAPE, "cpu")
    builds = CODES.builds
    again = header.pack_aux(aux, SHAPE, "cpu")
    assert again[3] is first[3] and again[4] is first[4] and CODES.builds == builds
    aux["n"][1, 2, 3] = 2 if int(aux["n"][1, 2, 3]) != 2 else 1  # an in-place write
    _check_packed(header, aux)
    assert CODES.builds == builds + 1
