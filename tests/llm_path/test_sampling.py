"""Best-of-k with a timer: every sample is drawn, each through its own
feedback loop, and the fastest verified candidate is kept."""

from __future__ import annotations

import pytest
from llm_fakes import make_client

from cubridge.llm import user
from cubridge.llm.loop import Rejected
from cubridge.llm_path import StageFailed, StageSettings
from cubridge.llm_path.sampling import best_of_k


def check(reply: str) -> int:
    if not reply.isdigit():
        raise Rejected(f"expected a number of microseconds, got {reply!r}")
    return int(reply)


def test_fastest_verified_candidate_wins(llm_server, tmp_path):
    llm_server.reply("30", "oops", "10", "20")  # sample 1 needs a second round
    client = make_client("openai", llm_server, tmp_path, stage="lower")
    sel = best_of_k(client, [user("go")], check, StageSettings(rounds=2, k=3),
                    timer=lambda us: us / 1000.0)
    assert [c.sample for c in sel.candidates] == [0, 1, 2]
    assert sel.best.sample == 1 and sel.best.value == 10 and sel.best.rounds == 2
    assert sel.timing == "fastest of 3 verified candidate(s): 0.010 ms"
    bodies = [r["body"] for r in llm_server.requests]
    assert "expected a number" in bodies[2]["messages"][-1]["content"]


def test_no_candidate_passes(llm_server, tmp_path):
    llm_server.reply("a", "b")
    client = make_client("openai", llm_server, tmp_path, stage="lower")
    with pytest.raises(StageFailed, match=r"no verified candidate out of 2: sample 0: .*'a'"):
        best_of_k(client, [user("go")], check, StageSettings(rounds=1, k=2))
