"""What every LLM stage can be told: rounds, best-of-k, temperature, limits."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

# Executor shapes (b, sq, sk) of the IR verification: tails on both sides,
# Sq != Sk, a single query row; run with each of the spec's reduced head configs.
IR_SIZES: tuple[tuple[int, int, int], ...] = ((1, 65, 129), (2, 200, 127), (1, 1, 70))


class StageFailed(Exception):
    """No candidate passed verification within the rounds; the run directory
    keeps every exchange and the last error."""


@dataclass(frozen=True)
class StageSettings:
    rounds: int = 4  # replies per candidate (the first plus feedback rounds)
    k: int = 1  # candidates (best-of-k); without timing the first verified one is kept
    temperature: float | None = None  # None: the LLM config's
    sandbox_timeout_s: float = 300.0  # per execution of generated CuIR
    # A lowered kernel's GPU check (a child process) that reports no progress for
    # this long is taken to hang and killed (cubridge.llm_path.gpu_check).
    gpu_timeout_s: float = 120.0
    ir_sizes: Sequence[tuple[int, int, int]] = IR_SIZES
    ir_trials: int = 1
    # also the spec check's long case (past twice the spec's largest constant,
    # cubridge.spec.lengths) and every dtype of the spec, as `cubridge run` does
    ir_spec_lengths: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}")
        if self.sandbox_timeout_s <= 0:
            raise ValueError(f"sandbox timeout must be positive, got {self.sandbox_timeout_s}")
        if self.gpu_timeout_s <= 0:
            raise ValueError(f"GPU timeout must be positive, got {self.gpu_timeout_s}")


def add_stage_arguments(parser: argparse.ArgumentParser, *, seed: bool = True) -> None:
    """The LLM stage loop's options (`seed=False` where the command has its own --seed)."""
    group = parser.add_argument_group("LLM stage loop")
    group.add_argument("--rounds", type=int, default=4,
                       help="replies per candidate, feedback included (default 4)")
    group.add_argument("-k", "--k", "--best-of", dest="k", type=int, default=1,
                       help="candidates to draw; the fastest verified one is kept (default 1)")
    group.add_argument("--temperature", type=float,
                       help="sampling temperature (default: the LLM config's)")
    group.add_argument("--sandbox-timeout", type=float, default=300.0,
                       help="seconds per sandboxed execution of generated CuIR (default 300)")
    group.add_argument("--gpu-timeout", type=float, default=120.0,
                       help="seconds a lowered kernel's GPU check may go without progress "
                       "before it is taken to hang and killed (default 120)")
    if seed:
        group.add_argument("--seed", type=int, help="seed of the verifiers' random inputs")


def settings_from_args(args: argparse.Namespace) -> StageSettings:
    return StageSettings(rounds=args.rounds, k=args.k, temperature=args.temperature,
                         sandbox_timeout_s=args.sandbox_timeout, gpu_timeout_s=args.gpu_timeout,
                         seed=args.seed)
