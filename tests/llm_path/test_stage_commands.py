"""The stage commands: `cubridge transfer` through the CLI against the local
server stops cleanly when the budget runs out (exit 4, run directory kept)
and says how to resume; bad arguments get clear errors."""

from __future__ import annotations

import pytest
from llm_fakes import SECRET
from stage_fixtures import SPECS

from cubridge.cli import main


@pytest.fixture
def llm_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_LLM_KEY", SECRET)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))


def test_transfer_command_budget_stop_and_resume_hint(llm_server, llm_env, tmp_path, capsys):
    llm_server.reply("Normalise the rows first.")
    out = tmp_path / "run"
    code = main(["transfer", "--from", "fa_sm80", "--spec", str(SPECS / "cosine.py"),
                 "--out", str(out), "--llm-provider", "openai", "--llm-model", "m",
                 "--llm-base-url", f"{llm_server.url}/v1", "--llm-api-key-env", "TEST_LLM_KEY",
                 "--llm-budget-calls", "1", "--rounds", "3"])
    err = capsys.readouterr().err
    assert code == 4
    assert "budget exhausted" in err and "rerun the same command" in err
    assert (out / "spec.py").is_file() and list((out / "llm" / "transfer").glob("0001-*.json"))
    assert SECRET not in "".join(p.read_text() for p in out.rglob("*") if p.is_file())


def test_lower_command_needs_an_existing_target(capsys, tmp_path):
    code = main(["lower", str(tmp_path / "missing.py"), "--from", "fa_sm80",
                 "--llm-provider", "manual"])
    assert code == 2
    assert "target CuIR" in capsys.readouterr().err


def test_lift_command_without_a_spec_beside_the_kernel(capsys, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text("__global__ void k() {}\n")
    code = main(["lift", str(cu), "--llm-provider", "manual", "--out", str(tmp_path / "r")])
    assert code == 2 and "has no spec.py beside it; pass --spec" in capsys.readouterr().err


def test_settings_are_validated():
    from cubridge.llm_path import StageSettings

    with pytest.raises(ValueError, match="k must be >= 1"):
        StageSettings(k=0)
    with pytest.raises(ValueError, match="temperature must be in"):
        StageSettings(temperature=3.0)
