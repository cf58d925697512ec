"""Best-of-k: draw up to k candidates, each through the feedback loop, and
keep the fastest verified one.

Each candidate is an independent conversation (`sample` index s, so its
requests hash and cache apart). When no timer is available (no GPU, or an IR
stage whose executor time says nothing about the kernel), the first verified
candidate is kept and no further ones are drawn: the selection says that
timing was unavailable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cubridge.llm.client import LLMClient
from cubridge.llm.loop import RoundsExhausted, ask_until_valid
from cubridge.llm.request import Message
from cubridge.llm.transcript import Exchange
from cubridge.llm_path.settings import StageFailed, StageSettings

T = TypeVar("T")


@dataclass
class Candidate(Generic[T]):
    sample: int
    value: T
    exchange: Exchange
    rounds: int  # replies it took
    time_ms: float | None = None


@dataclass
class Selection(Generic[T]):
    best: Candidate[T]
    candidates: list[Candidate[T]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one per candidate that never passed
    timing: str = ""  # how the best was chosen

    def describe(self) -> dict[str, Any]:
        return {
            "best_sample": self.best.sample,
            "timing": self.timing,
            "candidates": [{"sample": c.sample, "rounds": c.rounds, "time_ms": c.time_ms,
                            "exchange": str(c.exchange.path)} for c in self.candidates],
            "failures": self.failures,
        }


def best_of_k(
    client: LLMClient,
    messages: Sequence[Message],
    check: Callable[[str], T],
    settings: StageSettings,
    *,
    describe: Callable[[T], Any] | None = None,
    timer: Callable[[T], float] | None = None,
    untimed: str = "timing unavailable: kept the first verified candidate",
) -> Selection[T]:
    """Draw candidates until k are verified (or the first, without a timer).
    `untimed` says how the kept candidate was chosen when there is no timer,
    in the stage's own terms (a lowering without a GPU ran nothing).
    Raises StageFailed when none passes; BudgetExceeded and ProviderError
    propagate (the transcripts so far stay on disk, a rerun resumes)."""
    candidates: list[Candidate[T]] = []
    failures: list[str] = []
    for sample in range(settings.k):
        try:
            outcome = ask_until_valid(client, messages, check, rounds=settings.rounds,
                                      describe=describe, sample=sample,
                                      temperature=settings.temperature)
        except RoundsExhausted as exc:
            failures.append(f"sample {sample}: {exc}")
            continue
        cand = Candidate(sample, outcome.value, outcome.exchange, len(outcome.rounds))
        if timer is not None:
            cand.time_ms = timer(outcome.value)
        candidates.append(cand)
        if timer is None:
            break
    if not candidates:
        raise StageFailed(f"[{client.stage}] no verified candidate out of {settings.k}: "
                          + " | ".join(failures))
    if timer is None:
        note = untimed
        best = candidates[0]
    else:
        best = min(candidates, key=lambda c: c.time_ms if c.time_ms is not None else 1e30)
        note = f"fastest of {len(candidates)} verified candidate(s): {best.time_ms:.3f} ms"
    return Selection(best, candidates, failures, note)
