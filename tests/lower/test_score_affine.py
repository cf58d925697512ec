"""Affine folding of score_mod (cubridge/lower/score_affine.py): which score mods
take the form A * core(B * score), and that the header's folded hooks compute
score_mod (compiled on the host)."""

from __future__ import annotations

import math

import pytest
import torch
from hook_variants import VARIANTS, make_spec
from host_harness import run_program

from cubridge.lower.hook_header import generate_header
from cubridge.lower.score_affine import (
    LinearScore,
    affine_score,
    is_tanh_core,
    linear_score,
    row_factor,
)
from cubridge.transfer.hooks import plan_hooks


def _form(score_mod):
    return affine_score(plan_hooks(make_spec("s", None, score_mod)).score.node)


def test_soft_capping_folds_both_constants():
    form = affine_score(plan_hooks(VARIANTS["softcap_causal"]).score.node)
    assert form is not None
    assert form.outer == 30.0 and form.inner == pytest.approx(1 / 30.0)
    assert repr(form.core) == "tanh[float](score)"


def test_which_score_mods_fold():
    assert repr(_form(lambda s, b, h, q, k: 2.0 * s)) == (
        "AffineScore(outer=2.0, inner=1.0, core=score)")
    neg = _form(lambda s, b, h, q, k: s * -3.0)  # A must be > 0: -3 folds as B instead
    assert neg is not None and (neg.outer, neg.inner) == (1.0, -3.0)
    assert _form(lambda s, b, h, q, k: -2.0 * (s * s)) is None  # A < 0, score used twice
    assert _form(lambda s, b, h, q, k: s + (k - q)) is None  # additive: nothing to fold
    twice = _form(lambda s, b, h, q, k: 5.0 * (s * 0.5 + (s * 0.5).tanh()))
    assert twice is not None and (twice.outer, twice.inner) == (5.0, 1.0)  # B only if used once
    assert affine_score(plan_hooks(VARIANTS["alibi_causal"]).score.node) is None


def test_softmax_and_nonlinear_sigmoid_headers_expose_the_fold():
    assert "CUBRIDGE_HOOKS_SCORE_AFFINE" in generate_header(
        plan_hooks(VARIANTS["softcap_causal"])).text
    # sigmoid of a soft-capped score: A folds into the exponent's FFMA
    comb = generate_header(plan_hooks(VARIANTS["comb_prefix_softcap_sigmoid"])).text
    assert "CUBRIDGE_HOOKS_SCORE_AFFINE" in comb
    assert "CUBRIDGE_HOOKS_SIGMOID_EXPONENT" not in comb
    # a linear sigmoid score takes the exponent form alone (both define kScoreIn)
    linear = generate_header(plan_hooks(VARIANTS["sigmoid_causal"])).text
    assert "CUBRIDGE_HOOKS_SIGMOID_EXPONENT" in linear
    assert "CUBRIDGE_HOOKS_SCORE_AFFINE" not in linear
    # relu: no exponent to fold A into
    relu = make_spec("r", None, lambda s, b, h, q, k: 30 * (s / 30).tanh(), "relu")
    assert "CUBRIDGE_HOOKS_SCORE_AFFINE" not in generate_header(plan_hooks(relu)).text


def test_a_tanh_core_is_named_for_the_kernel():
    """fa_sm90 evaluates a soft cap's tanh its own way (a polynomial) where the header
    says the core is tanh of the score and nothing else."""
    assert is_tanh_core(affine_score(plan_hooks(VARIANTS["softcap_causal"]).score.node).core)
    for fn in (lambda s, b, h, q, k: 30 * (s / 30).sigmoid(),      # another core
               lambda s, b, h, q, k: 30 * (s / 30 + 0.5).tanh(),  # tanh of more than s
               lambda s, b, h, q, k: 30 * (s / 30).tanh() + 1.0):  # not affine
        form = _form(fn)
        assert form is None or not is_tanh_core(form.core)
        assert "CUBRIDGE_HOOKS_CORE_TANH" not in generate_header(
            plan_hooks(make_spec("t", None, fn))).text
    assert "CUBRIDGE_HOOKS_CORE_TANH" in generate_header(
        plan_hooks(VARIANTS["softcap_causal"])).text
    comb = make_spec("c", None, lambda s, b, h, q, k: 30 * (s / 30).tanh(), "sigmoid")
    assert "CUBRIDGE_HOOKS_CORE_TANH" in generate_header(plan_hooks(comb)).text


def _kernel_constant(name: str) -> float:
    import re
    from pathlib import Path

    import cubridge.kernels.fa_sm90 as fa_sm90

    text = (Path(fa_sm90.__file__).parent / "fa_sm90.cu").read_text()
    return float(re.search(rf"constexpr float {name} = ([0-9.]+)f;", text).group(1))


def test_the_soft_cap_polynomial_is_exact_enough_where_the_kernel_takes_it():
    """fa_sm90's tanh-form sigmoid weight of a soft cap A tanh(z) takes tanh as
    p(z) = z - z^3/3 + 2 z^5/15 for A >= kPolyCapMinOut, checking only that every
    weight is >= 1/256 of its scale (its comment has the argument). In float64 over
    z in [-60, 60]: p increases, p >= tanh for z > 0, and where the check passes the
    weight's relative error is at most 2e-4 for every such A (1.3e-5 at A = 30)."""
    z = torch.linspace(-60.0, 60.0, 2_400_001, dtype=torch.float64)
    p = z - z**3 / 3 + 2 * z**5 / 15
    assert bool((p.diff() > 0).all())
    assert bool(((p - z.tanh())[z > 0] >= -1e-15).all())  # (float64 rounding near 0)
    sigmoid = lambda y: 0.5 * (1 + (0.5 * y).tanh())  # noqa: E731  (no overflow)
    a_min = _kernel_constant("kPolyCapMinOut")
    worst = {}
    for a in (a_min, 25.0, 30.0, 50.0, 100.0, 1000.0):
        wp, wt = sigmoid(a * p), sigmoid(a * z.tanh())
        # (the check reads the weight rounded to 16 bits: a margin of 2^-8 below 1/256)
        kept = wp >= (1 - 2**-8) / 256
        worst[a] = ((wp - wt).abs()[kept] / wt[kept]).max().item()
    assert max(worst.values()) <= 2e-4, worst
    assert worst[30.0] <= 2e-5, worst


def _host_program(body: str) -> str:
    """A host program over a generated header: `body` prints "plain folded" pairs
    from an AuxArgs `aux` (empty until the body fills it)."""
    return ("#include <cstdio>\n#include \"hook_types.cuh\"\n#include \"cubridge_hooks.cuh\"\n"
            "using namespace cubridge_hooks;\nint main() {\n  cubridge::AuxArgs aux{};\n"
            + body + "  return 0;\n}\n")


PROGRAM = _host_program("""  for (float s = -200.f; s <= 200.f; s += 0.37f) {
    printf("%.9e %.9e\\n", (double)score_mod(s, 0, 0, 0, 0, aux),
           (double)(kScoreOut * score_core(kScoreIn * s, 0, 0, 0, 0, aux)));
  }
""")


def _pairs(words: list[str]) -> list[tuple[float, float]]:
    values = list(map(float, words))
    return list(zip(values[::2], values[1::2], strict=True))


@pytest.mark.slow
def test_folded_hooks_compute_score_mod(tmp_path):
    rows = _pairs(run_program(generate_header(plan_hooks(VARIANTS["softcap_causal"])).text,
                              PROGRAM, tmp_path))
    assert len(rows) > 1000
    for plain, folded in rows:
        assert folded == pytest.approx(plain, rel=2e-6, abs=1e-6)
        assert not math.isnan(folded)


def _linear(score_mod):
    return linear_score(plan_hooks(make_spec("s", None, score_mod, "sigmoid")).score.node)


def test_which_sigmoid_scores_are_linear():
    assert linear_score(None) == LinearScore(1.0, None)  # no score_mod: sigmoid(scale s)
    minus = linear_score(plan_hooks(VARIANTS["sigmoid_causal"]).score.node)
    assert minus is not None and minus.inner == 1.0 and repr(minus.offset).startswith("neg[")
    assert _linear(lambda s, b, h, q, k: s * 0.5 + (k - q)).inner == 0.5
    assert repr(_linear(lambda s, b, h, q, k: (q - k) + s / 4.0)) == (
        "LinearScore(inner=0.25, offset=cast[float](sub[int](q, k)))")
    assert _linear(lambda s, b, h, q, k: 30 * (s / 30).tanh()) is None
    assert _linear(lambda s, b, h, q, k: s * s) is None
    assert _linear(lambda s, b, h, q, k: (q - k) - s) is None  # -s: not folded (yet)
    assert "CUBRIDGE_HOOKS_SIGMOID_EXPONENT" in generate_header(
        plan_hooks(VARIANTS["sigmoid_causal"])).text
    assert "CUBRIDGE_HOOKS_SIGMOID_EXPONENT" not in generate_header(
        plan_hooks(VARIANTS["comb_prefix_softcap_sigmoid"])).text


EXPONENT_PROGRAM = _host_program("""  float log_s = 8.3f;
  aux.num = 1;
  aux.t[0].data = &log_s;
  const float scale = 0.088f, k1 = -scale * kScoreIn * 1.4426950408889634f;
  for (float s = -300.f; s <= 300.f; s += 0.61f) {
    const float folded = activation_of_exponent(
        s * k1 + (-1.4426950408889634f * score_offset(0, 0, 0, 0, aux) + kExponentBias));
    printf("%.9e %.9e\\n", (double)activation(score_mod(s * scale, 0, 0, 0, 0, aux)),
           (double)folded);
  }
""")


@pytest.mark.slow
def test_sigmoid_exponent_hooks_compute_the_weight(tmp_path):
    rows = _pairs(run_program(generate_header(plan_hooks(VARIANTS["sigmoid_causal"])).text,
                              EXPONENT_PROGRAM, tmp_path))
    assert len(rows) > 900
    for plain, folded in rows:
        assert folded == pytest.approx(plain, rel=1e-5, abs=1e-30)


SIGMOID_OF_CORE_PROGRAM = _host_program("""  int64_t prefix = 7;
  float log_s = 8.3f;  // (the test variant's score_mod subtracts a 0-d aux)
  aux.num = 2;
  aux.t[0].data = &prefix;
  aux.t[1].data = &log_s;
  const float scale = 0.088f;
  for (float s = -3000.f; s <= 3000.f; s += 3.7f) {
    const float folded = activation_of_exponent(
        score_core(s * scale * kScoreIn, 0, 0, 0, 0, aux) * (-1.4426950408889634f * kScoreOut)
        + kExponentBias);
    printf("%.9e %.9e\\n", (double)activation(score_mod(s * scale, 0, 0, 0, 0, aux)),
           (double)folded);
  }
""")


@pytest.mark.slow
def test_sigmoid_of_an_affine_score_computes_the_weight(tmp_path):
    """fa_sm90's fold for a soft-capped sigmoid: activation_of_exponent(core * -A
    log2(e) + bias) is the header's activation(score_mod(s))."""
    header = generate_header(plan_hooks(VARIANTS["comb_prefix_softcap_sigmoid"])).text
    rows = _pairs(run_program(header, SIGMOID_OF_CORE_PROGRAM, tmp_path))
    assert len(rows) > 1500
    assert min(plain for plain, _ in rows) < 1e-12 and max(plain for plain, _ in rows) > 0.99
    for plain, folded in rows:
        assert folded == pytest.approx(plain, rel=1e-5, abs=1e-30)


def _row_factor(score_mod):
    return row_factor(plan_hooks(make_spec("r", None, score_mod)).score.node)


def test_which_score_mods_are_a_factor_no_key_changes():
    assert repr(_row_factor(lambda s, b, h, q, k: s * (q + 1))) == "cast[float](add[int](q, 1))"
    assert _row_factor(lambda s, b, h, q, k: (s * 0.5) * (q + 1)) is not None  # constants too
    signs = row_factor(plan_hooks(VARIANTS["row_factor_signs"]).score.node)
    assert signs is not None and "aux_load" in repr(signs) and "score" not in repr(signs)
    for fn in (lambda s, b, h, q, k: s * 2.0,  # a constant: the affine fold's
               lambda s, b, h, q, k: s * (k + 1),  # the key changes it
               lambda s, b, h, q, k: s * (q + 1) + 1.0,  # not a product
               lambda s, b, h, q, k: s * s * (q + 1),  # the score twice
               lambda s, b, h, q, k: (s * (q + 1)).tanh()):
        assert _row_factor(fn) is None
    assert row_factor(None) is None
    assert "CUBRIDGE_HOOKS_SCORE_ROW_FACTOR" in generate_header(
        plan_hooks(VARIANTS["row_factor_signs"])).text
    # only under softmax (a sigmoid kernel has no row max to scale)
    sig = make_spec("g", None, lambda s, b, h, q, k: s * (q + 1), "sigmoid")
    assert "CUBRIDGE_HOOKS_SCORE_ROW_FACTOR" not in generate_header(plan_hooks(sig)).text
    # a soft cap is affine, not a row factor
    assert "CUBRIDGE_HOOKS_SCORE_ROW_FACTOR" not in generate_header(
        plan_hooks(VARIANTS["softcap_causal"])).text


ROW_FACTOR_PROGRAM = _host_program("""  float slope[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
  aux.num = 1;
  aux.t[0].data = slope;
  aux.t[0].size[0] = 4;
  aux.t[0].stride[0] = 1;
  for (int h = 0; h < 4; ++h)
    for (int q = 0; q < 40; ++q)
      for (float s = -50.f; s <= 50.f; s += 3.1f)
        printf("%.9e %.9e\\n", (double)score_mod(s, 0, h, q, 7, aux),
               (double)(score_row_factor(0, h, q, aux) * s));
""")


@pytest.mark.slow
def test_row_factor_hook_computes_score_mod(tmp_path):
    rows = _pairs(run_program(generate_header(plan_hooks(VARIANTS["row_factor_signs"])).text,
                              ROW_FACTOR_PROGRAM, tmp_path))
    assert len(rows) == 4 * 40 * 33
    assert any(plain < 0 for plain, _ in rows) and any(plain > 0 for plain, _ in rows)
    for plain, folded in rows:
        assert folded == pytest.approx(plain, rel=1e-6, abs=1e-30)
