"""Deliberately wrong implementations: the verifier catches every one, and
passes the same kernel without its bug."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from verify_candidates import TiledAttention, raising_impl, zeros_impl

from cubridge.attention import Shape
from cubridge.spec import load
from cubridge.spec.model import Tolerance
from cubridge.verify import verify

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"
# Small, fast, and still: tails on both sides of a 64-key tile, Sq != Sk both
# ways, a GQA group of 2 over two KV heads.
SHAPES = [Shape(1, 4, 2, 65, 129, 32), Shape(2, 4, 2, 130, 67, 32)]
# Rows with no allowed key: queries >= 60 + 1023 see nothing under the window.
EMPTY_ROW_SHAPES = [Shape(1, 2, 1, 1100, 60, 32)]


def run(spec_name: str, impl, shapes=SHAPES, **kw):
    return verify(load(SPEC_DIR / f"{spec_name}.py"), impl, shapes=shapes, dtypes=["bf16"],
                  seed=1234, **kw)


@pytest.mark.parametrize("spec_name, impl, shapes", [
    ("causal", TiledAttention(), SHAPES),
    ("softcap_causal", TiledAttention(softcap=30.0), SHAPES),
    ("sliding_window_1024", TiledAttention(window=1024), EMPTY_ROW_SHAPES),
])
def test_correct_tiled_kernel_passes(spec_name, impl, shapes):
    report = run(spec_name, impl, shapes)
    assert report.passed, report.table()
    assert all(c.lse_err is not None and c.lse_err < 1e-5 for c in report.cases)


WRONG = [
    # (id, spec, impl, shapes, what the failure reason must mention)
    ("off_by_one_causal", "causal", TiledAttention(off_by_one_causal=True), SHAPES,
     "max abs error"),
    ("wrong_scale", "causal", TiledAttention(wrong_scale=True), SHAPES, "relative error"),
    ("missing_softcap", "softcap_causal", TiledAttention(softcap=30.0, skip_softcap=True),
     SHAPES, "relative error"),
    ("last_partial_tile_dropped", "full", TiledAttention(causal=False, drop_partial_tile=True),
     SHAPES, "relative error"),
    ("wrong_lse", "causal", TiledAttention(lse_base2=True), SHAPES, "lse error"),
    ("unwritten_output_rows", "causal", TiledAttention(leave_last_rows=True), SHAPES, "NaN"),
    ("nan_on_empty_rows", "sliding_window_1024",
     TiledAttention(window=1024, nan_on_empty_rows=True), EMPTY_ROW_SHAPES, "NaN"),
    ("wrong_gqa_mapping", "causal", TiledAttention(gqa_modulo=True), SHAPES, "relative error"),
    ("modifies_its_input", "causal", TiledAttention(scale_q_in_place=True), SHAPES,
     "modified its inputs ['q']"),
    ("raises", "causal", raising_impl, SHAPES, "kernel launch failed"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case_id, spec_name, impl, shapes, reason", WRONG,
                         ids=[w[0] for w in WRONG])
def test_wrong_implementation_is_caught(case_id, spec_name, impl, shapes, reason):
    report = run(spec_name, impl, shapes)
    assert not report.passed
    failed = report.failures
    assert failed, report.table()
    assert any(reason in c.reason for c in failed), report.table()
    if case_id == "raises":
        assert all(c.verdict == "error" for c in report.cases)
    if case_id == "missing_softcap":
        # normal inputs give small scores, where the cap barely bends them (only
        # the LSE shows it); scaled inputs push scores into the cap and the output moves
        assert all("relative error" not in c.reason for c in failed
                   if c.distribution == "normal")
        assert any("relative error" in c.reason for c in failed if c.distribution == "scaled")


@pytest.mark.slow
def test_wrong_lse_passes_without_lse_check_but_not_with_it():
    assert run("causal", TiledAttention(lse_base2=True), require_lse=False).passed is False
    report = run("causal", lambda q, k, v, scale=None: TiledAttention()(q, k, v, scale)[0],
                 require_lse=False)
    assert report.passed, report.table()
    missing = run("causal", lambda q, k, v, scale=None: TiledAttention()(q, k, v, scale)[0])
    assert not missing.passed and "no lse returned" in missing.failures[0].reason


def test_all_zeros_output_is_caught_even_with_loose_tolerances():
    import dataclasses
    spec = load(SPEC_DIR / "causal.py")
    loose = dataclasses.replace(spec, tolerances={torch.bfloat16: Tolerance(1.5, 1.5, 1.5)})
    report = verify(loose, zeros_impl, shapes=SHAPES, dtypes=["bf16"], seed=1,
                    require_lse=False)
    assert all(c.verdict == "pass" and c.weak for c in report.cases)  # within the loose bounds
    assert not report.passed and "no case tells a trivial output apart" in report.summary()


def test_report_table_and_dict():
    report = run("causal", TiledAttention(off_by_one_causal=True))
    table = report.table()
    assert table.splitlines()[0].startswith("FAIL: ")
    assert "B1 H4/2 S65x129 D32" in table and "near_ties" in table and "seed" in table
    d = report.to_dict()
    assert d["passed"] is False and len(d["cases"]) == len(SHAPES) * 3
    assert d["cases"][0]["shape"]["sq"] == 65


@pytest.mark.slow
def test_fresh_inputs_each_trial_and_seeds_reproduce():
    seen = []

    def recording(q, k, v, scale=None):
        seen.append(q.clone())
        return TiledAttention()(q, k, v, scale)

    report = run("causal", recording, shapes=SHAPES[:1], trials=2)
    assert report.passed and len(seen) == 6
    assert all(not torch.equal(a, b) for i, a in enumerate(seen) for b in seen[i + 1:])
    again = []
    run("causal", lambda q, k, v, scale=None: again.append(q.clone()) or
        TiledAttention()(q, k, v, scale), shapes=SHAPES[:1], trials=2)
    assert all(torch.equal(a, b) for a, b in zip(seen, again, strict=True))
