"""`cubridge run` from the command line: the LLM path's flags and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubridge.cli import main

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"


@pytest.fixture
def no_llm_config(tmp_path, monkeypatch):
    for name in ("PROVIDER", "REPLAY_DIR", "CONFIG", "MODEL"):
        monkeypatch.delenv(f"CUBRIDGE_LLM_{name}", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))


@pytest.mark.slow
def test_run_takes_the_llm_provider_its_message_suggests(tmp_path, no_llm_config, capsys):
    out = tmp_path / "run"
    # without a provider the LLM path stops (exit 3) and says to pass --llm-provider
    assert main(["run", str(SPECS / "cosine.py"), "--out", str(out), "--no-bench"]) == 3
    assert "pass --llm-provider" in (out / "report.md").read_text()
    # ...which `cubridge run` accepts: here a replay provider with no recordings
    empty = tmp_path / "recordings"
    empty.mkdir()
    assert main(["run", str(SPECS / "cosine.py"), "--out", str(out), "--no-bench",
                 "--llm-provider", "replay", "--llm-replay-dir", str(empty)]) == 3
    report = (out / "report.md").read_text()
    assert "no recorded reply" in report and str(empty) in report
    capsys.readouterr()
    assert main(["run", str(SPECS / "cosine.py"), "--out", str(out),
                 "--llm-provider", "nosuch"]) == 2
    assert "unknown provider 'nosuch'" in capsys.readouterr().err
