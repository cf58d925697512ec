"""Token and cost accounting, and per-stage budgets.

Prices are per million tokens, looked up by model name; a table key may be a
glob (`claude-sonnet-4*`), and the most specific (longest) matching key wins.
A budget caps one stage's tokens, cost and calls within one invocation:
replies answered from the cache cost nothing and do not count. The check runs
before each call, so a stage that has spent its budget stops with
`BudgetExceeded` and nothing already written is touched.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from cubridge.llm.errors import BudgetExceeded, ConfigError
from cubridge.llm.request import Usage


@dataclass(frozen=True)
class Price:
    """US dollars per million input and output tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        if self.input_per_mtok < 0 or self.output_per_mtok < 0:
            raise ValueError("prices must be >= 0")

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input_per_mtok + usage.output_tokens * self.output_per_mtok
        ) / 1e6


def find_price(prices: Mapping[str, Price], model: str) -> Price | None:
    """The price of `model`: an exact key, else the longest glob key that matches."""
    if model in prices:
        return prices[model]
    matches = [key for key in prices if fnmatch.fnmatchcase(model, key)]
    return prices[max(matches, key=len)] if matches else None


@dataclass(frozen=True)
class Budget:
    """Limits for one stage; None means unlimited."""

    tokens: int | None = None
    cost_usd: float | None = None
    calls: int | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "cost_usd", "calls"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"budget {name} must be >= 0, got {value}")

    def merged_over(self, base: Budget) -> Budget:
        """This budget's limits, falling back to `base` where this one sets none."""
        return Budget(
            self.tokens if self.tokens is not None else base.tokens,
            self.cost_usd if self.cost_usd is not None else base.cost_usd,
            self.calls if self.calls is not None else base.calls,
        )

    @property
    def unlimited(self) -> bool:
        return self.tokens is None and self.cost_usd is None and self.calls is None


class BudgetTracker:
    """Spending of one stage against its budget (thread-safe: best-of-k may
    run its draws in parallel)."""

    def __init__(self, stage: str, budget: Budget, price: Price | None, model: str) -> None:
        if budget.cost_usd is not None and price is None:
            raise ConfigError(
                f"stage {stage!r} has a cost budget but model {model!r} has no price: add "
                f'[prices."{model}"] with input_per_mtok and output_per_mtok to the config file'
            )
        self.stage = stage
        self.budget = budget
        self.price = price
        self.tokens = 0
        self.cost_usd = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise BudgetExceeded if the next call would go past a limit."""
        with self._lock:
            b = self.budget
            if b.calls is not None and self.calls >= b.calls:
                self._stop(f"{self.calls} of {b.calls} calls made")
            if b.tokens is not None and self.tokens >= b.tokens:
                self._stop(f"{self.tokens} tokens used of {b.tokens}")
            if b.cost_usd is not None and self.cost_usd >= b.cost_usd:
                self._stop(f"${self.cost_usd:.4f} spent of ${b.cost_usd:.4f}")

    def add(self, usage: Usage) -> float | None:
        """Record a call that was made; returns its cost (None without a price)."""
        cost = self.price.cost(usage) if self.price is not None else None
        with self._lock:
            self.calls += 1
            self.tokens += usage.total_tokens
            if cost is not None:
                self.cost_usd += cost
        return cost

    def _stop(self, what: str) -> None:
        raise BudgetExceeded(
            f"stage {self.stage!r} budget exhausted: {what}; the run directory is intact, "
            f"rerun with a larger budget to resume from the cached exchanges"
        )

    def summary(self) -> str:
        cost = f", ${self.cost_usd:.4f}" if self.price is not None else ""
        return f"{self.calls} calls, {self.tokens} tokens{cost}"
