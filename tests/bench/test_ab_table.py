"""bench/kernels/fa_sm90/ab_table.py: an A/B's numbers as a README quotes them."""

from __future__ import annotations

import pytest
from fa_sm90_scripts import load_fa_sm90_script


@pytest.fixture(scope="module")
def ab_table():
    return load_fa_sm90_script("ab_table")


def _row(variant: str, runs: dict[str, list[float | str]]) -> dict:
    impls = []
    for label, values in runs.items():
        for i, v in enumerate(values):
            ok = not isinstance(v, str)
            impls.append({"impl": f"{label}#{i + 1}", "status": "ok" if ok else v,
                          "tflops": v if ok else None})
    return {"variant": variant, "config": "llama2_7b", "seq_len": 4096, "impls": impls}


def test_rounds_are_quoted_as_run(ab_table):
    text = ab_table.table([_row("causal", {"head": [600.4, 610.0], "new": [620.0, 630.6]})])
    assert "| causal | llama2_7b | 4096 | 600 / 610 | 620 / 631 |" in text


def test_medians_carry_the_change_against_the_first_label(ab_table):
    rows = [_row("causal", {"head": [600.0, 640.0, 620.0], "new": [651.0, 590.0, 700.0],
                            "slow": [558.0, 558.0, 560.0]})]
    text = ab_table.table(rows, medians=True)
    assert text.splitlines()[0] == "| variant | config | S | head | new | slow |"
    assert "| causal | llama2_7b | 4096 | 620 | 651 (+5.0%) | 558 (-10.0%) |" in text


def test_a_failed_round_is_named_not_averaged(ab_table):
    rows = [_row("causal", {"head": [600.0, 600.0], "new": [650.0, "mismatch"]}),
            _row("softcap", {"head": ["error", 600.0], "new": [650.0, 650.0]})]
    lines = ab_table.table(rows, medians=True).splitlines()
    assert lines[2].endswith("| 600 | mismatch |")
    assert lines[3].endswith("| error | 650 |")  # (no baseline: no change quoted)


def test_the_summary_spans_the_cases_changes(ab_table):
    rows = [_row("causal", {"head": [600.0], "new": [630.0]}),
            _row("softcap", {"head": [500.0], "new": [490.0]}),
            _row("window", {"head": [400.0], "new": [404.0]}),
            _row("doc", {"head": [400.0], "new": ["mismatch"]})]  # (left out)
    assert ab_table.change_summary(rows) == "new: median +1.0%, -2.0% to +5.0% over 3 cases"
