"""Masks written in score_mod (cubridge/transfer/score_masks.py): the -inf
condition is lifted into the mask, so blocks are classified; anything else that
yields -inf stays in score_mod."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hook_variants import make_spec

from cubridge.attention import Shape
from cubridge.transfer.hooks import check_trace, plan_from_json, plan_hooks
from cubridge.transfer.score_masks import split_score_mask
from cubridge.transfer.trace import trace_score_mod

INF = float("inf")


def _split(fn, aux=None):
    kept, cond = split_score_mask(trace_score_mod(fn, aux or {}).node)
    return repr(kept), None if cond is None else repr(cond)


def test_the_forms_users_write_are_lifted():
    assert _split(lambda s, b, h, q, k: torch.where(q >= k, s, -INF)) == \
        ("score", "ge[bool](q, k)")
    assert _split(lambda s, b, h, q, k: s + torch.where(q >= k, 0.0, -math.inf)) == \
        ("score", "ge[bool](q, k)")
    # masked_fill's condition is negated as a comparison (row intervals read it)
    assert _split(lambda s, b, h, q, k: s.masked_fill(q < k, -INF)) == \
        ("score", "ge[bool](q, k)")
    kept, cond = _split(lambda s, b, h, q, k: torch.where(
        q - k < 100, torch.where(q >= k, 30 * torch.tanh(s / 30), -INF), -INF) + 0.5 * h)
    assert "tanh" in kept and "-inf" not in kept and "cast[float](h)" in kept
    assert cond == "and[bool](lt[bool](sub[int](q, k), 100), ge[bool](q, k))"


@pytest.mark.parametrize("fn", [
    lambda s, b, h, q, k: torch.where(s > 0, s, -INF),           # reads the score
    lambda s, b, h, q, k: torch.where(q >= k, s, -1e9),           # not -inf
    lambda s, b, h, q, k: 2 * torch.where(q >= k, s, -INF),       # under another op
    lambda s, b, h, q, k: torch.tanh(torch.where(q >= k, s, -INF)),
], ids=["reads_score", "finite", "scaled", "under_tanh"])
def test_other_minus_infinities_stay_in_score_mod(fn):
    assert _split(fn)[1] is None


def test_a_mask_written_in_score_mod_is_classified_and_checked():
    spec = make_spec("causal_in_score_mod", None,
                     lambda s, b, h, q, k: torch.where(q >= k, s, -INF))
    plan = plan_hooks(spec)
    assert plan.mask_in_score and plan.score is None  # nothing left for score_mod
    assert plan.classification == "interval"
    check_trace(spec, plan, Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))
    again = plan_from_json(json.loads(json.dumps(plan.to_json())), spec)
    assert again.mask_in_score and again.mask.node == plan.mask.node


def test_the_lifted_condition_joins_the_mask_mod():
    spec = make_spec("window", lambda b, h, q, k: q - k < 50,
                     lambda s, b, h, q, k: torch.where(q >= k, s * 2, -INF))
    plan = plan_hooks(spec)
    assert repr(plan.mask.node) == "and[bool](lt[bool](sub[int](q, k), 50), ge[bool](q, k))"
    assert repr(plan.score.node) == "mul[float](score, 2.0)"
    check_trace(spec, plan, Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))


def test_check_trace_catches_a_lifted_mask_that_differs_from_the_score_mod():
    import dataclasses

    from cubridge.spec import SpecError
    from cubridge.transfer.trace import trace_mask_mod

    spec = make_spec("causal_in_score_mod", None,
                     lambda s, b, h, q, k: torch.where(q >= k, s, -INF))
    plan = plan_hooks(spec)
    wrong = dataclasses.replace(plan, mask=trace_mask_mod(lambda b, h, q, k: q > k, {}))
    with pytest.raises(SpecError, match="the traced score_mod differs"):
        check_trace(spec, wrong, Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))


def test_finfo_min_scores_are_raised_to_the_floor_under_softmax_alone():
    """finfo(float32).min * log2(e) overflows to -inf in the kernels' scaled row max;
    under softmax the kernels' score_mod takes SCORE_FLOOR instead, whose product is
    finite; -inf, ordinary biases and the elementwise normalisers keep their scores."""
    from cubridge.transfer.score_masks import SCORE_FLOOR, kernel_score

    lowest = torch.finfo(torch.float32).min
    assert torch.isinf(torch.tensor(lowest) * math.log2(math.e))  # (float32, as the kernels)
    assert torch.isfinite(torch.tensor(SCORE_FLOOR) * math.log2(math.e))
    traced = trace_score_mod(lambda s, b, h, q, k: torch.where(q >= k, s, lowest) - 1e9, {})
    floored = kernel_score(traced.node, "softmax")
    consts = {n.arg for n in floored.walk() if n.op == "const"}
    assert SCORE_FLOOR in consts and lowest not in consts and 1e9 in consts, consts
    assert kernel_score(traced.node, "sigmoid") is traced.node
    kept = trace_score_mod(lambda s, b, h, q, k: s * 2 + torch.where(q >= k, 0.0, -INF), {})
    assert kernel_score(kept.node, "softmax") is kept.node


def test_check_trace_calls_the_mods_with_floating_aux_in_float64(tmp_path):
    """A bf16 aux met by an index (`bias[b, h] * |q - k|`) is rounded to bf16 per
    element when the mod runs on its own dtype; the hooks compute in float32 and
    the verifier's reference gets float aux in float64, so check_trace does too
    (it refused this mod: 'computes something else when called on tensors')."""
    from cubridge.spec import load

    path = tmp_path / "bf16_aux.py"
    path.write_text(
        "import torch\n"
        "from cubridge.attention import HeadConfig\n"
        "CONFIGS = [HeadConfig('a', 4, 1, 64)]\n"
        "AUX_SHAPES = {'bb': ('B', 'Hq'), 'hb': ('Hq',)}\n"
        "def make_aux(shape, generator, device):\n"
        "    bb = torch.rand(shape.b, shape.hq, generator=generator).to(torch.bfloat16)\n"
        "    hb = torch.rand(shape.hq, generator=generator).to(torch.float16)\n"
        "    return {'bb': bb.to(device), 'hb': hb.to(device)}\n"
        "def score_mod(score, b, h, q_idx, kv_idx, *, bb, hb):\n"
        "    return score + hb[h] * 0.5 - bb[b, h] * (q_idx - kv_idx).abs() * 0.01\n")
    spec = load(path)
    check_trace(spec, plan_hooks(spec), Shape(b=1, hq=4, hk=1, sq=61, sk=64, d=64))
