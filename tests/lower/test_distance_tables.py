"""Distance tables (cubridge/transfer/distance_tables.py): which score_mod terms are
tabulated over (h, q - k), the tables' values, their cache, and the header's read."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.spec import load
from cubridge.spec.from_mods import from_mods
from cubridge.transfer.distance_tables import TABLES, distance_tables
from cubridge.transfer.hooks import plan_hooks
from cubridge.transfer.torch_render import grid_function

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
SHAPE = Shape(b=2, hq=3, hk=1, sq=70, sk=150, d=64)  # Sq != Sk: both offsets matter


def _plan(score_mod):
    return plan_hooks(from_mods(score_mod, name="t"))


def _terms(spec_or_plan):
    plan = spec_or_plan if hasattr(spec_or_plan, "score") else plan_hooks(spec_or_plan)
    return distance_tables(plan.score.node if plan.score else None)


def test_t5_buckets_are_one_table_of_the_head_and_distance():
    (table,) = _terms(load(EXAMPLES / "t5_relative_bias.py"))
    assert table.by_head and table.dtype == torch.float32
    assert {x.arg for x in table.term.walk() if x.op == "var"} == {"h", "q", "k"}
    assert not any(x.op == "var" and x.arg == "score" for x in table.term.walk())


@pytest.mark.parametrize("name", ["relative_position", "alibi", "alibi_causal",
                                  "softcap_causal", "causal", "pair_bias"])
def test_cheap_or_other_terms_stay_as_they_are(name):
    """An affine term (ALiBi), one read at an affine column (relative_position),
    a term of the score (the soft cap) or of b and the pair (pair_bias): no table."""
    assert _terms(load(EXAMPLES / f"{name}.py")) == ()


def test_terms_of_b_or_of_the_positions_apart_are_not_tabulated():
    assert _terms(_plan(lambda s, b, h, q, k: s + torch.log((q - k).abs() + b + 1.0))) == ()
    assert _terms(_plan(lambda s, b, h, q, k: s + torch.log(q.abs() + k + 1.0))) == ()
    # costly work on the head alone (a slope computed from h) leaves the term affine
    assert _terms(_plan(lambda s, b, h, q, k: s + (k - q) * torch.exp2(-(h + 1) * 8.0 / 4))) == ()
    # a function of the distance alone gives one row
    (t,) = _terms(_plan(lambda s, b, h, q, k: s * torch.exp(-((q - k) ** 2) / 100.0)))
    assert not t.by_head


def test_a_sin_or_cos_of_the_distance_is_a_table_and_of_the_score_runs_per_score():
    """cos_distance_bias' `0.5 cos(2 pi (q - k) / 128)` (and a cos of a scaled distance,
    which has no division) is one table read; a sin of the score stays in score_mod,
    on the SFU's sin.approx."""
    for term in (lambda q, k: 0.5 * torch.cos(2 * math.pi * (q - k) / 128),
                 lambda q, k: 0.2 * torch.cos((q - k) * 0.05),
                 lambda q, k: ((k - q) * 0.01).sin()):
        (t,) = _terms(_plan(lambda s, b, h, q, k, term=term: s + term(q, k)))
        assert not t.by_head and {"sin", "cos"} & {x.op for x in t.term.walk()}
    assert _terms(_plan(lambda s, b, h, q, k: s + 0.3 * torch.sin(s))) == ()
    header = generate_header(_plan(lambda s, b, h, q, k: s + 0.3 * torch.sin(s)
                                   + 0.2 * torch.cos((q - k) * 0.05))).text
    score_mod = header.split("score_mod(float s")[1].split("}")[0]
    assert "detail::fast_sin(s)" in score_mod and "cos" not in score_mod
    assert "aux_load_c<float, 2>(aux, 0, 0, q - k + aux.seqlen_k - 1)" in score_mod


def _t5_header_and_aux():
    spec = load(EXAMPLES / "t5_relative_bias.py")
    header = generate_header(plan_hooks(spec))
    aux = dict(spec.make_aux(SHAPE, torch.Generator().manual_seed(3), torch.device("cpu")))
    return spec, header, aux


def test_the_table_holds_the_term_at_every_pair_and_the_header_reads_it():
    spec, header, aux = _t5_header_and_aux()
    (table,) = header.distance_tables
    slot = next(s for s in header.slots if s.source == "distance_table")
    assert slot.name == table.name and slot.rank == 2
    assert f"aux_load_c<float, 2>(aux, {slot.slot}, h, q - k + aux.seqlen_k - 1)" in header.text
    assert "fast_log" not in header.text.split("score_mod(float s")[1].split("}")[0]
    packed = header.pack_aux(aux, SHAPE)
    t = packed[slot.slot]
    assert t.shape == (SHAPE.hq, SHAPE.sq + SHAPE.sk - 1) and t.is_contiguous()
    h = torch.arange(SHAPE.hq).view(-1, 1, 1)
    q = torch.arange(SHAPE.sq).view(1, -1, 1)
    k = torch.arange(SHAPE.sk).view(1, 1, -1)
    want = grid_function(table.term)(torch.tensor(0), h, q, k, **aux)
    got = t[h, q - k + SHAPE.sk - 1]
    assert torch.equal(got, want.float())
    # and that is the spec's own score_mod minus the score
    zero = torch.zeros(1, SHAPE.hq, SHAPE.sq, SHAPE.sk)
    spec_bias = spec.score_mod(zero, torch.tensor(0), h, q, k, t5_bias=aux["t5_bias"])
    assert torch.equal(got.expand_as(spec_bias[0]), spec_bias[0])


def test_tables_are_built_once_per_problem_and_aux_and_again_when_it_changes():
    _, header, aux = _t5_header_and_aux()
    slot = next(s.slot for s in header.slots if s.source == "distance_table")
    first = header.pack_aux(aux, SHAPE)[slot]
    builds = TABLES.builds
    assert header.pack_aux(aux, SHAPE)[slot] is first and TABLES.builds == builds
    other = Shape(1, SHAPE.hq, 1, 33, 40, 64)
    assert header.pack_aux(aux, other)[slot].shape == (SHAPE.hq, 72)
    assert TABLES.builds == builds + 1
    aux["t5_bias"].add_(1.0)  # in place: the cached table is stale
    again = header.pack_aux(aux, SHAPE)[slot]
    assert TABLES.builds == builds + 2 and torch.allclose(again, first + 1.0)


def test_a_table_without_its_aux_is_a_clear_error():
    _, header, _ = _t5_header_and_aux()
    with pytest.raises(KeyError, match="reads aux \\['t5_bias'\\], not given"):
        header.pack_aux({}, SHAPE)


def test_tables_take_only_free_aux_slots():
    """A spec whose own aux fill the kernel's eight slots keeps its term per score
    instead of failing to lower."""
    many = {f"w{i}": torch.ones(4) for i in range(8)}

    def score_mod(s, b, h, q, k, *, w0, w1, w2, w3, w4, w5, w6, w7):
        bucket = torch.log(((k - q).abs() + 1).float()).long().clamp(max=3)
        return s + w0[bucket] + w1[h] + w2[h] + w3[h] + w4[h] + w5[h] + w6[h] + w7[h]

    full = generate_header(plan_hooks(from_mods(score_mod, name="t", aux=many)))
    assert full.distance_tables == () and len(full.slots) == 8
    (one,) = generate_header(plan_hooks(from_mods(
        lambda s, b, h, q, k, *, w0: s + w0[torch.log(((k - q).abs() + 1).float()).long()
                                           .clamp(max=3)], name="t", aux={"w0": many["w0"]}))
    ).distance_tables
    assert one.by_head is False


def test_selects_on_the_scores_path_are_computed_not_tabulated():
    """A sign, a clamp or a piecewise select of the distance is an instruction or two
    a score; a table read would cost a gather and its address (96 B of spills on two
    user specs). With `selects=True` (the A/B's other side) they are tabulated."""
    sign = _plan(lambda s, b, h, q, k: s + 0.5 * torch.sign(q - k).float())
    clamp = _plan(lambda s, b, h, q, k: s - 0.1 * torch.clamp_max((q - k).abs(), 64).float())
    piecewise = _plan(lambda s, b, h, q, k: s + torch.where((q - k).abs() < 16, 1.0, -0.5))
    for plan in (sign, clamp, piecewise):
        assert _terms(plan) == ()
        (table,) = distance_tables(plan.score.node, selects=True)
        assert "h" not in {x.arg for x in table.term.walk() if x.op == "var"}


def test_a_select_in_a_reads_index_or_beside_a_logarithm_is_tabulated():
    """A clamp that computes a gather's index (the read waits on it) and a select
    beside a logarithm or a division still pay for a table."""
    w = {"w": torch.randn(4, 9)}
    (read,) = _terms(_plan_aux(
        lambda s, b, h, q, k, *, w: s + w[h, torch.clamp(q - k, -4, 4) + 4], w))
    assert any(x.op == "aux_load" for x in read.term.walk())
    (log,) = _terms(_plan(lambda s, b, h, q, k: s + torch.where(
        q > k, torch.log((q - k).float() + 1.0), 0.0)))
    assert any(x.op == "log" for x in log.term.walk())
    (div,) = _terms(_plan(lambda s, b, h, q, k: s + torch.clamp((q - k) / 7.0, -3.0, 3.0)))
    assert any(x.op == "truediv" for x in div.term.walk())


def test_the_header_option_builds_either_form():
    plan = _plan(lambda s, b, h, q, k: s + 0.5 * torch.sign(q - k).float())
    assert generate_header(plan).distance_tables == ()
    (table,) = generate_header(plan, table_selects=True).distance_tables
    assert "aux_load_c<float" in generate_header(plan, table_selects=True).text


def _plan_aux(score_mod, aux):
    return plan_hooks(from_mods(score_mod, name="t", aux=aux))
