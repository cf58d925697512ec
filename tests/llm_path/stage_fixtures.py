"""Shared pieces of the stage tests: the recorded expert replies and settings
that keep the executor runs short."""

from __future__ import annotations

from pathlib import Path

from cubridge.llm_path import StageSettings

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "llm"
SPECS = ROOT / "examples" / "specs"
# Recorded fixtures: replies written by a person/agent acting as the expert,
# never a model's output (the transcripts carry this label).
FIXTURE_LABEL = "recorded fixture: expert reply written by a person/agent, not a model"

# One shape with tails on both sides and several tiles: enough to tell right from wrong.
FAST = StageSettings(rounds=4, ir_sizes=((1, 65, 129),), sandbox_timeout_s=120, seed=1,
                     ir_spec_lengths=False)


def fixture_reply(name: str) -> str:
    return (FIXTURES / name).read_text()
