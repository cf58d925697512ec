"""The comparison the issue asks for, computed from results: each variant over
the best verified peer, the geomean over the variants some peer runs, each
variant over our own causal, absolute bars where no peer runs; written as
summary.md beside results.md and by bench/vs_peers.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cubridge.bench.report import collect_metadata, write_reports
from cubridge.bench.runner import CaseResult, ImplResult
from cubridge.bench.summary import Targets, geomean, rows, summary_markdown

ROOT = Path(__file__).resolve().parents[2]


def case(variant: str, s: int, **tflops: float | str) -> CaseResult:
    """A case whose impls have these TFLOP/s (a string: that status, untimed)."""
    impls = [ImplResult(n, "ok", 1.0, t) if isinstance(t, float) else ImplResult(n, t)
             for n, t in tflops.items()]
    return CaseResult(variant, "llama2_7b", s, 4, 32, 32, 128, 1, 0.5, "causal", 1.0, "mods",
                      impls)


RESULTS = [
    case("causal", 4096, ours=600.0, sdpa=500.0, flex_flash=620.0, fa4="error"),
    case("prefix_lm", 4096, ours=560.0, sdpa=170.0, flex_flash=625.0, fa4="unsupported"),
    case("document_causal", 4096, ours=470.0, flex_flash=300.0, eager=900.0),
    case("relu_causal", 4096, ours=560.0, sdpa="unsupported"),
    case("sigmoid_causal", 4096, ours=500.0),
    case("alibi_causal", 4096, ours="wrong", flex_flash=400.0),
]


def test_best_peer_is_the_fastest_verified_non_eager_impl():
    by = {r.variant: r for r in rows(RESULTS)}
    assert by["causal"].best_peer == "flex_flash" and by["causal"].vs_best_peer == \
        pytest.approx(600 / 620)
    assert by["document_causal"].best_peer == "flex_flash"  # eager is not a peer
    assert by["relu_causal"].best_peer is None
    assert by["prefix_lm"].vs_causal == pytest.approx(560 / 600)
    assert by["alibi_causal"].ours is None and by["alibi_causal"].vs_best_peer is None


def test_summary_has_each_bar_and_verdict():
    text = summary_markdown(RESULTS, Targets())
    assert "| llama2_7b | 4096 | causal | 600 | flex_flash | 620 | 0.968x | 0.90x | met |" in text
    assert "| llama2_7b | 4096 | prefix_lm | 560 | flex_flash | 625 | 0.896x | 0.90x | NOT met |" \
        in text
    assert "| 4096 | relu_causal | 560 | no peer runs it | - | - | 550 TFLOP/s | met |" in text
    assert "| sigmoid_causal | 500 | no peer runs it | - | - | 550 TFLOP/s | NOT met |" in text
    assert "| alibi_causal | - | flex_flash | 400 | - | 0.90x | no figure |" in text
    # Geomean over the 4 variants some peer runs, one of them without our figure.
    assert "| llama2_7b | 4096 | 4 (ours missing on some) | - | 1.05x | no figure |" in text
    assert "| llama2_7b | 4096 | prefix_lm | 560 | 600 | 93% | 85% | met |" in text
    assert "| llama2_7b | 4096 | document_causal | 470 | 600 | 78% | 80% | NOT met |" in text
    assert "| causal | 600 | 600 |" not in text  # full and causal have no causal bar


def test_geomean_when_every_variant_has_our_figure():
    text = summary_markdown(RESULTS[:3])
    g = geomean([600 / 620, 560 / 625, 470 / 300])
    assert f"| llama2_7b | 4096 | 3 | {g:.3f}x | 1.05x | met |" in text
    assert text.startswith("Bars met: ")


@pytest.mark.slow  # the script's interpreter imports torch
def test_summary_md_is_written_with_ours_and_rendered_by_the_script(tmp_path):
    meta = collect_metadata("cubridge bench causal", "cpu", "test")
    paths = write_reports(tmp_path / "run", meta, RESULTS)
    summary = paths["summary"].read_text()
    assert summary.startswith("# cubridge bench: ours against the peers")
    assert "- command: `cubridge bench causal`" in summary
    script = subprocess.run([sys.executable, str(ROOT / "bench" / "vs_peers.py"),
                             str(paths["json"])], capture_output=True, text=True, cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert script.returncode == 0, script.stderr
    assert script.stdout.strip() == summary.strip()
    peers_only = [case("causal", 1024, sdpa=400.0)]
    assert "summary" not in write_reports(tmp_path / "peers", meta, peers_only)


def test_vs_causal_takes_a_peers_own_causal_and_names_bad_input(tmp_path, capsys):
    """bench/vs_causal.py: ours against our causal by default; `--impl NAME` a peer
    against its own causal; a missing file or an impl without results is a clear
    usage error, not a traceback."""
    import runpy

    meta = collect_metadata("cubridge bench causal", "cpu", "test")
    json_path = str(write_reports(tmp_path / "run", meta, RESULTS)["json"])
    vs_causal = runpy.run_path(str(ROOT / "bench" / "vs_causal.py"))["main"]
    assert vs_causal([json_path]) == 0
    assert "| prefix_lm | llama2_7b | 4096 | 560 | 600 | 93% | 85% | met |" in \
        capsys.readouterr().out
    assert vs_causal([json_path, "--impl", "flex_flash"]) == 0
    out = capsys.readouterr().out
    assert "| variant | config | S | flex_flash | causal |" in out
    assert "| prefix_lm | llama2_7b | 4096 | 625 | 620 | 101% | 85% | met |" in out
    assert "| document_causal | llama2_7b | 4096 | 300 | 620 | 48% | 85% | NOT met |" in out
    for argv, message in (([str(tmp_path / "nope.json")], "no such results file"),
                          ([json_path, "--impl", "nobody"], "no verified nobody results")):
        with pytest.raises(SystemExit):
            vs_causal(argv)
        assert message in capsys.readouterr().err


def test_rows_without_a_causal_figure_are_not_counted_as_misses():
    """A run without causal at some config and S (the attn-gym corpus names its own
    causal_mask) cannot judge the causal bar there: the row says so and the head
    counts it apart; ours missing stays a miss."""
    results = [case("prefix_lm", 2048, ours=560.0, flex_flash=500.0),
               case("alibi_causal", 2048, ours="wrong", flex_flash=400.0)]
    text = summary_markdown(results)
    assert "| llama2_7b | 2048 | prefix_lm | 560 | - | - | 85% | no causal figure |" in text
    assert "| llama2_7b | 2048 | alibi_causal | - | - | - | 85% | no figure |" in text
    # Counted: prefix_lm and alibi_causal against the best peer (met, no figure), the
    # geomean (no figure: ours missing on one), alibi_causal's causal row (no figure).
    assert text.startswith("Bars met: 1 of 4. Not counted: 1 row against our causal whose")
