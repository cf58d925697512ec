"""Retrying transient provider failures with exponential backoff and jitter.

Only `TransientProviderError` is retried (HTTP 429 and 5xx, timeouts, dropped
connections); any other error, such as a 400 or a 401, is raised at once. The
client libraries' own retries are switched off (max_retries=0) so this policy
is the one in force.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from cubridge.llm.errors import RetriesExhausted, TransientProviderError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Attempt n (1-based) that fails transiently waits
    `min(backoff_max_s, backoff_base_s * 2**(n-1))`, half of it fixed and half
    uniformly random (so clients hit by the same outage spread out), or the
    server's Retry-After when that is longer (still capped by backoff_max_s)."""

    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"retry max_attempts must be >= 1, got {self.max_attempts}")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("retry backoff times must be >= 0")

    def delay_s(self, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        delay = ceiling / 2 + rng.uniform(0, ceiling / 2)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.backoff_max_s))
        return delay


@dataclass
class RetryLog:
    """What the retries of one call went through, for the transcript."""

    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    waited_s: float = 0.0


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    log: RetryLog | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Call `fn` until it succeeds, raises a non-transient error, or the policy's
    attempts run out (then `RetriesExhausted` carries every error seen)."""
    log = log if log is not None else RetryLog()
    rng = rng or random.Random()
    while True:
        log.attempts += 1
        try:
            return fn()
        except TransientProviderError as exc:
            log.errors.append(str(exc))
            if log.attempts >= policy.max_attempts:
                history = "; ".join(f"attempt {i + 1}: {e}" for i, e in enumerate(log.errors))
                raise RetriesExhausted(
                    f"gave up after {log.attempts} attempts ({history})", status=exc.status
                ) from exc
            delay = policy.delay_s(log.attempts, exc.retry_after_s, rng)
            log.waited_s += delay
            sleep(delay)
