"""Masks written in score_mod (cubridge/transfer/score_masks.py): the -inf
condition is lifted into the mask, so blocks are classified; anything else that
yields -inf stays in score_mod. Floor masks (finfo.min) are lifted under softmax,
and the rows they leave no key get the spec's answer after the kernel
(cubridge/empty_rows.py)."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
import torch
from hook_variants import VARIANTS, make_spec

from cubridge.attention import Shape
from cubridge.transfer.hooks import check_trace, plan_from_json, plan_hooks
from cubridge.transfer.score_masks import split_floor_mask, split_score_mask
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


# -- floor masks: finfo.min written as Hugging Face writes it -----------------------------------

F32_MIN = torch.finfo(torch.float32).min
BF16_MIN = torch.finfo(torch.bfloat16).min


def _floor(fn, aux=None):
    split = split_floor_mask(trace_score_mod(fn, aux or {}).node)
    return None if split is None else (repr(split[0]), repr(split[1]), split[2])


@pytest.mark.parametrize("low", [F32_MIN, BF16_MIN], ids=["float32", "bfloat16"])
def test_floor_masks_in_the_forms_users_write_are_split(low):
    assert _floor(lambda s, b, h, q, k: torch.where(q >= k, s, low)) == \
        ("score", "ge[bool](q, k)", low)
    assert _floor(lambda s, b, h, q, k: s + torch.where(q >= k, 0.0, low)) == \
        ("score", "ge[bool](q, k)", low)
    assert _floor(lambda s, b, h, q, k: s.masked_fill(q < k, low)) == \
        ("score", "ge[bool](q, k)", low)
    # nested conditions of the same C, and a bias added to a masked where (C + x is C)
    kept, cond, c = _floor(lambda s, b, h, q, k: torch.where(
        q - k < 100, torch.where(q >= k, s * 2, low), low) + 0.5 * h)
    assert c == low and "-inf" not in kept and "cast[float](h)" in kept
    assert cond == "and[bool](lt[bool](sub[int](q, k), 100), ge[bool](q, k))"
    # -inf's split does not take them
    assert _split(lambda s, b, h, q, k: torch.where(q >= k, s, low))[1] is None


@pytest.mark.parametrize("fn", [
    # float16's lowest (-65504) is not absorbed: s + C is not C, a row it masks whole
    # weighs its keys by their scores
    lambda s, b, h, q, k: torch.where(q >= k, s, torch.finfo(torch.float16).min),
    lambda s, b, h, q, k: s + torch.where(q >= k, 0.0, torch.finfo(torch.float16).min),
    lambda s, b, h, q, k: torch.where(s > 0, s, F32_MIN),                 # reads the score
    lambda s, b, h, q, k: torch.tanh(torch.where(q >= k, s, F32_MIN)),    # under another op
    # two added terms: a pair masked by both is C + C (-inf in float32), not C
    lambda s, b, h, q, k: s + torch.where(q >= k, 0.0, F32_MIN) + torch.where(
        q - k < 9, 0.0, F32_MIN),
    # two values: a row masked whole would weigh them differently
    lambda s, b, h, q, k: torch.where(q - k < 9, torch.where(q >= k, s, BF16_MIN), F32_MIN),
    # a kept side that masks too (with C or -inf) does not come out C where it does
    lambda s, b, h, q, k: torch.where(q >= k, torch.where(s > 0, s, F32_MIN), F32_MIN),
    lambda s, b, h, q, k: torch.where(q >= k, torch.where(s > 0, s, -INF), F32_MIN),
], ids=["f16_where", "f16_added", "reads_score", "under_tanh", "two_terms", "two_values",
        "kept_floor", "kept_minus_inf"])
def test_other_floor_constants_stay_in_score_mod(fn):
    assert _floor(fn) is None


def test_a_floor_mask_under_softmax_is_lifted_without_a_mask_mod_and_filled():
    score_mod = lambda s, b, h, q, k: torch.where(q >= k, s * 2, F32_MIN)  # noqa: E731
    spec = make_spec("finfo_causal", None, score_mod)
    plan = plan_hooks(spec)
    assert plan.mask_in_score and plan.mask_floor == F32_MIN
    assert plan.classification == "interval" and repr(plan.mask.node) == "ge[bool](q, k)"
    assert repr(plan.score.node) == "mul[float](score, 2.0)"
    check_trace(spec, plan, Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))
    again = plan_from_json(json.loads(json.dumps(plan.to_json())), spec)  # (plan.json)
    assert again.mask_floor == F32_MIN and again.mask.node == plan.mask.node
    # (the CuIR target carries C: its executor fills the rows too)
    from cubridge.kernels.fa_sm80.cuir import FaSm80
    from cubridge.transfer.target import render_target

    assert f"empty_row_score = {F32_MIN!r}" in render_target(plan, FaSm80)
    kept = plan_hooks(make_spec("finfo_padded", lambda b, h, q, k: k < 1000, score_mod))
    assert kept.mask_floor is None and not kept.mask_in_score
    assert F32_MIN in {n.arg for n in kept.score.node.walk() if n.op == "const"}
    assert "empty_row_score" not in render_target(plan_hooks(VARIANTS["causal_in_score_mod"]),
                                                  FaSm80)


@pytest.mark.parametrize("normalizer", ["sigmoid", "relu"])
def test_a_floor_mask_under_an_elementwise_normaliser_is_an_exact_mask(normalizer, tmp_path):
    """sigmoid(C) and relu(C) are 0: a pair at C weighs nothing, as at -inf. The
    condition is lifted beside a mask_mod too, no pass after the kernel is asked
    for, and the target CuIR computes the spec (verify-ir's executor on the CPU)."""
    from cubridge.kernels.fa_sm80.cuir import FaSm80
    from cubridge.transfer.rules import transfer_by_rules
    from cubridge.transfer.target import render_target

    score_mod = lambda s, b, h, q, k: torch.where(q >= k, s * 2, F32_MIN)  # noqa: E731
    shapes = [Shape(b=1, hq=2, hk=1, sq=65, sk=33, d=64),
              Shape(b=1, hq=2, hk=2, sq=40, sk=70, d=64)]
    for i, mask_mod in enumerate((None, lambda b, h, q, k: k > 20)):  # (rows 0-20 keep none)
        spec = make_spec(f"finfo_{normalizer}", mask_mod, score_mod, normalizer)
        plan = plan_hooks(spec)
        assert plan.mask_in_score and plan.mask_floor is None
        assert plan.classification == "interval"
        assert repr(plan.score.node) == "mul[float](score, 2.0)"
        check_trace(spec, plan, Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))
        assert "empty_row_score" not in render_target(plan, FaSm80)
        result = transfer_by_rules(spec, FaSm80, out_dir=tmp_path / str(i), shapes=shapes,
                                   plan=plan)
        assert result.report.passed


def test_check_trace_compares_a_floor_masks_pairs_with_its_value():
    import dataclasses

    from cubridge.spec import SpecError

    spec = VARIANTS["finfo_window_empty_rows"]
    plan = plan_hooks(spec)
    check_trace(spec, plan, Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))
    with pytest.raises(SpecError, match="the traced score_mod differs"):
        check_trace(spec, dataclasses.replace(plan, mask_floor=F32_MIN),
                    Shape(b=1, hq=2, hk=1, sq=61, sk=64, d=64))


def test_the_fill_gives_rows_without_keys_the_mean_of_v_and_leaves_the_others():
    from cubridge.empty_rows import fill_empty_rows

    gen = torch.Generator().manual_seed(0)
    b, hq, hk, sq, sk, dv = 2, 4, 2, 6, 5, 8
    v = torch.randn(b, hk, sk, dv, generator=gen).to(torch.bfloat16)
    out = torch.randn(b, hq, sq, dv, generator=gen).to(torch.bfloat16)
    lse = torch.randn(b, hq, sq, generator=gen)
    empty = torch.zeros(b, hq, sq, dtype=torch.bool)
    empty[0, 1, 4:] = empty[1, 3, 0] = True
    out[empty], lse[empty] = 0, -INF  # (what the kernels leave there)
    got_out, got_lse = fill_empty_rows(out, lse, v, BF16_MIN)
    assert got_out.dtype == torch.bfloat16 and got_lse.dtype == torch.float32
    mean = v.double().mean(2).repeat_interleave(hq // hk, dim=1)  # [B, Hq, Dv]
    for bi, h, q in empty.nonzero().tolist():  # query head h reads KV head h // 2
        torch.testing.assert_close(got_out[bi, h, q].double(), mean[bi, h], rtol=1e-2,
                                   atol=1e-2)
        assert got_lse[bi, h, q] == torch.tensor(BF16_MIN + math.log(sk), dtype=torch.float32)
    assert torch.equal(got_out[~empty], out[~empty]) and torch.equal(got_lse[~empty],
                                                                       lse[~empty])


def test_the_header_fills_only_where_a_row_may_keep_no_key():
    from cubridge.empty_rows import fill_empty_rows
    from cubridge.lower.hook_header import generate_header

    # 16 keys behind each query; finfo.min causal, whose rows all keep key 0
    window = generate_header(plan_hooks(VARIANTS["finfo_window_empty_rows"]))
    causal = generate_header(plan_hooks(VARIANTS["finfo_min_causal"]))
    v = torch.randn(1, 1, 20, 8).to(torch.bfloat16)
    for sq, fills in ((35, False), (36, True)):  # rows q >= Sk + 15 keep no key
        out = torch.zeros(1, 2, sq, 8, dtype=torch.bfloat16)
        lse = torch.zeros(1, 2, sq)
        lse[..., 35:] = -INF
        got = window.fill_empty_rows(out, lse, v)
        assert window.fills_empty_rows(Shape(1, 2, 1, sq, 20, 8)) == fills
        if fills:
            want = fill_empty_rows(out, lse, v, window.plan.mask_floor)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
            assert (got[1][..., 35:] > -INF).all()
        else:
            assert got[0] is out and got[1] is lse  # skipped: no pass at all
        assert causal.fill_empty_rows(out, lse, v)[1] is lse
    assert not causal.fills_empty_rows(None) and window.fills_empty_rows(None)
    plain = generate_header(plan_hooks(VARIANTS["causal_in_score_mod"]))  # -inf: rows stay 0
    assert not plain.fills_empty_rows(Shape(1, 2, 1, 36, 20, 8))


def test_the_fill_traces_whole_under_torch_compile():
    """Under torch.compile the header's proof is the one for every shape (sizes may be
    symbolic), taken once while Dynamo traces: the graph holds the pass or nothing."""
    from cubridge.lower.hook_header import generate_header

    window = generate_header(plan_hooks(VARIANTS["finfo_window_empty_rows"]))
    causal = generate_header(plan_hooks(VARIANTS["finfo_min_causal"]))
    v = torch.randn(1, 1, 20, 8).to(torch.bfloat16)
    for sq in (36, 40):  # (a second length: Dynamo may make it symbolic)
        out = torch.zeros(1, 2, sq, 8, dtype=torch.bfloat16)
        lse = torch.zeros(1, 2, sq)
        lse[..., 35:] = -INF
        for header in (window, causal):
            compiled = torch.compile(header.fill_empty_rows, fullgraph=True, backend="eager")
            got, want = compiled(out, lse, v), header.fill_empty_rows(out, lse, v)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


RECORDS = Path(__file__).resolve().parents[2] / "bench" / "results"
# the bench's floor-mask specs: every row keeps key 0; a window with rows keeping none
FLOOR_SPECS = {"finfo_min_causal": RECORDS / "prepared-trace-ops/specs/finfo_min_causal.py",
               "finfo_window_empty_rows":
                   RECORDS / "prepared-next-device/specs/finfo_window_empty_rows.py"}


@pytest.mark.parametrize("name", sorted(FLOOR_SPECS))
def test_floor_mask_specs_verify_as_targets_and_need_the_fill_for_empty_rows(name, tmp_path):
    """The target CuIR of a floor mask (its blocks classified) against the spec's
    reference, at Sq > Sk + 15 (the window's last rows keep no key) and Sq < Sk; without
    the pass after the kernel those rows are out = 0, lse = -inf, and it fails."""
    import dataclasses

    from cubridge.kernels.fa_sm90.cuir import FaSm90
    from cubridge.spec import load
    from cubridge.transfer.rules import NotHookConfined, transfer_by_rules

    spec = load(FLOOR_SPECS[name])
    plan = plan_hooks(spec)
    assert plan.mask_floor == F32_MIN and plan.classification == "interval"
    shapes = [Shape(b=1, hq=2, hk=1, sq=65, sk=33, d=64),
              Shape(b=1, hq=2, hk=2, sq=40, sk=70, d=64)]
    from cubridge.lower.hook_header import generate_header

    assert generate_header(plan).fills_empty_rows(shapes[0]) == (
        name == "finfo_window_empty_rows")
    result = transfer_by_rules(spec, FaSm90, out_dir=tmp_path, shapes=shapes, plan=plan)
    assert result.report.passed and "empty_row_score" in result.path.read_text()
    unfilled = functools.partial(transfer_by_rules, spec, FaSm90, out_dir=tmp_path / "unfilled",
                                 shapes=shapes, plan=dataclasses.replace(plan, mask_floor=None))
    if name == "finfo_window_empty_rows":
        with pytest.raises(NotHookConfined, match="lse is -inf on"):
            unfilled()
    else:
        assert unfilled().report.passed  # (no row to fill)


@pytest.mark.slow  # verify-ir at the spec check's long case, in every dtype: ~45 s
@pytest.mark.parametrize("name", sorted(FLOOR_SPECS))
def test_floor_mask_specs_pass_ir_verification(name, tmp_path, capsys):
    """`cubridge transfer` on the spec files: the rules' target, with the fill, passes
    verify-ir on every shape `cubridge run` checks."""
    from cubridge.cli import main

    out = tmp_path / "run"
    assert main(["transfer", "--spec", str(FLOOR_SPECS[name]), "--out", str(out)]) == 0
    assert json.loads((out / "plan.json").read_text())["hooks"]["mask_floor"] == F32_MIN
    report = json.loads((out / "verify_ir.json").read_text())
    assert report["cases"] and all(c["verdict"] == "pass" for c in report["cases"])
