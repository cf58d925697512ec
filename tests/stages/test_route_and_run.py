"""Which path `cubridge run` takes, and the LLM path end to end: a spec whose
change leaves the hooks (cosine) runs the LLM transfer, here replayed from
the recorded expert fixture, and the run says which path it took and why."""

from __future__ import annotations

import json

import pytest
from stage_fixtures import FIXTURE_LABEL, SPECS, fixture_reply

from cubridge.llm import Request, record_fixture
from cubridge.pipeline.run import RunOptions, run
from cubridge.spec import load
from cubridge.stages.route import choose_path
from cubridge.stages.settings import StageSettings
from cubridge.stages.transfer_llm import transfer_messages


@pytest.mark.parametrize(("spec", "path", "why"), [
    ("causal", "rules", "mask_mod traces into fa_sm80's hooks"),
    ("alibi_causal", "rules", "score_mod and mask_mod trace"),
    ("full", "rules", "plain attention"),
    ("cosine", "llm", "reference is not plain softmax attention"),
    ("mla", "llm", "head dims (QK/V) 192/128 are not among fa_sm80's [64, 128]"),
])
def test_choose_path(spec, path, why):
    choice = choose_path(load(SPECS / f"{spec}.py"))
    assert choice.path == path and why in choice.reason


def test_cubridge_run_takes_the_llm_path_for_cosine(tmp_path, monkeypatch):
    fixtures, out = tmp_path / "fixtures", tmp_path / "run"
    request = Request.of(transfer_messages(SPECS / "cosine.py"), temperature=None,
                         max_tokens=8192, stop=None, sample=0)
    record_fixture(fixtures, "transfer", request, fixture_reply("transfer_cosine.md"),
                   label=FIXTURE_LABEL)
    monkeypatch.setenv("CUBRIDGE_LLM_PROVIDER", "replay")
    monkeypatch.setenv("CUBRIDGE_LLM_REPLAY_DIR", str(fixtures))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    # Keep this test about the path and the transfer: lowering needs nvcc (tested apart).
    monkeypatch.setattr("cubridge.build.nvcc.nvcc_available", lambda: False)
    monkeypatch.setattr("cubridge.stages.llm_run.StageSettings",
                        lambda: StageSettings(ir_sizes=((1, 65, 129),), seed=2))
    lines: list[str] = []
    result = run(SPECS / "cosine.py", RunOptions(out=out, log=lines.append, bench=False))

    assert any(line.startswith("[path] LLM stages: the spec has no FlexAttention-style mods")
               for line in lines)
    assert "nvcc not found: stopped after the verified target CuIR" in result.stopped
    manifest = json.loads((out / "manifest.json").read_text())
    assert "PASS: cuir_FaSm80Cosine" in manifest["stages"]["transfer"]["summary"]
    report = (out / "report.md").read_text()
    assert "LLM transfer fa_sm80 -> FaSm80Cosine" in report and "Stopped: nvcc not found" in report
    assert (out / "target_cuir.py").is_file() and (out / "spec.py").is_file()
