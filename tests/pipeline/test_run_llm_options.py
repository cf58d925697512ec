"""Operating the LLM path from `cubridge run`: the loop's options reach the
stages, and bad values are refused before anything runs."""

from __future__ import annotations

import pytest

from cubridge.cli import main
from cubridge.pipeline.run import RunResult


@pytest.fixture
def captured(monkeypatch, tmp_path):
    seen = {}

    def fake_run(spec_path, opts):
        seen["opts"] = opts
        return RunResult(tmp_path)

    monkeypatch.setattr("cubridge.pipeline.run.run", fake_run)
    return seen


def test_run_takes_rounds_k_and_temperature(captured, tmp_path):
    assert main(["run", "examples/specs/cosine.py", "--rounds", "6", "--k", "3",
                 "--temperature", "0.7", "--gpu-timeout", "45", "--seed", "5"]) == 0
    settings = captured["opts"].llm_settings
    assert (settings.rounds, settings.k, settings.temperature) == (6, 3, 0.7)
    assert settings.gpu_timeout_s == 45 and settings.seed == 5
    assert captured["opts"].seed == 5  # one --seed for the verifiers of both paths


def test_defaults_are_the_stage_defaults(captured):
    from cubridge.llm_path.settings import StageSettings

    assert main(["run", "examples/specs/cosine.py"]) == 0
    assert captured["opts"].llm_settings == StageSettings()


@pytest.mark.parametrize("flags,why", [(["--rounds", "0"], "rounds must be >= 1"),
                                       (["--k", "0"], "k must be >= 1"),
                                       (["--temperature", "3"], "temperature must be in")])
def test_bad_values_are_refused(captured, capsys, flags, why):
    assert main(["run", "examples/specs/cosine.py", *flags]) == 2
    assert why in capsys.readouterr().err and "opts" not in captured
