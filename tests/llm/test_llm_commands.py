"""`cubridge llm ...` sub-commands, in process."""

from __future__ import annotations

import sys
import threading
import time

from llm_fakes import SECRET

from cubridge.cli import main


def test_config_shows_sources_and_never_the_key(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("CUBRIDGE_LLM_MODEL", "env-model")
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    assert main(["llm", "config", "--llm-provider", "anthropic"]) == 0
    out = capsys.readouterr().out
    assert "'anthropic'" in out and "(flag)" in out and "'env-model'" in out and "(env)" in out
    assert "ANTHROPIC_API_KEY is set (value never shown)" in out and SECRET not in out


def test_config_error_is_reported(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["llm", "config", "--llm-provider", "gemini"]) == 2
    assert "unknown provider 'gemini'" in capsys.readouterr().err


def test_ask_with_the_manual_provider_then_log(monkeypatch, capsys, tmp_path):
    """A person plays the model: the prompt file appears, the reply file is written."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("CUBRIDGE_LLM_MANUAL_POLL_S", "0.02")
    (tmp_path / "prompt.md").write_text("What is 6 * 7?")
    manual = tmp_path / "run" / "llm" / "manual"

    def person() -> None:
        for _ in range(500):
            prompts = list(manual.glob("*.prompt.md"))
            if prompts:
                reply = prompts[0].name.replace(".prompt.md", ".reply.md")
                (manual / reply).write_text("42")
                return
            time.sleep(0.01)

    threading.Thread(target=person, daemon=True).start()
    argv = ["llm", "ask", str(tmp_path / "prompt.md"), "--run-dir", str(tmp_path / "run")]
    assert main([*argv, "--llm-provider", "manual", "--llm-manual-timeout-s", "10"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "42" and "[manual llm] prompt:" in captured.err

    assert main(["llm", "pending", str(tmp_path / "run")]) == 0
    assert "no prompts waiting" in capsys.readouterr().out
    assert main(["llm", "log", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "ask" in out and "#0001" in out and "manual/manual" in out and "1 exchanges" in out


def test_ask_with_a_command_provider(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("ping"))
    command = f"{sys.executable} -c 'import sys; print(sys.stdin.read()[::-1])'"
    argv = ["llm", "ask", "-", "--run-dir", str(tmp_path / "run"), "--stage", "probe"]
    assert main([*argv, "--llm-provider", "command", "--llm-command", command]) == 0
    assert capsys.readouterr().out.strip() == "gnip"
    assert (tmp_path / "run" / "llm" / "probe").is_dir()


def test_check(capsys, tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("import torch\nx = torch.zeros(2)\n")
    bad.write_text("import torch\nx = torch.load('w.pt')\n")
    assert main(["llm", "check", str(good)]) == 0
    assert main(["llm", "check", str(bad)]) == 1
    assert "line 2: torch.load is not allowed" in capsys.readouterr().err
