"""Control helpers: pipeline stage and phase bookkeeping, integer helpers."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative ints: the number of `b`-sized blocks covering `a`."""
    return -(-a // b)


class PipelineState:
    """Where a role is in a ring of `stages` buffers: `index` is the stage to
    use now, `phase` the parity to wait for on that stage's barriers. Call
    `advance()` after each use; the phase flips each time the index wraps.

    Producer and consumer each keep their own state. A producer waiting on
    "empty" barriers starts with `phase=1` (`PipelineState(stages, phase=1)`):
    on a fresh barrier, a wait for parity 1 returns at once, so the first
    pass over the ring does not wait for releases that never happened.
    """

    def __init__(self, stages: int, phase: int = 0):
        if stages < 1:
            raise ValueError(f"PipelineState: stages must be >= 1, got {stages}")
        if phase not in (0, 1):
            raise ValueError(f"PipelineState: phase must be 0 or 1, got {phase}")
        self.stages = stages
        self.index = 0
        self.phase = phase
        self.count = 0

    def advance(self) -> None:
        self.count += 1
        self.index += 1
        if self.index == self.stages:
            self.index = 0
            self.phase ^= 1

    def __repr__(self) -> str:
        return f"PipelineState(index={self.index}, phase={self.phase})"
