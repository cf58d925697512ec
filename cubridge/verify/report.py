"""What a verification found: one CaseResult per call, and the table."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from cubridge.attention import Shape


@dataclass
class CaseResult:
    """One call of the candidate on one fresh problem instance.

    verdict: "pass", "fail" (wrong numbers), "error" (the candidate raised),
    "timeout" or "crash" (isolated runs). Errors are relative to the float64
    reference: rel_err = ||out - ref|| / ||ref||; max_abs is compared with
    abs_limit (a fraction of max |ref|); trivial_zero / trivial_mean are the
    relative errors of all-zeros and mean-of-V outputs; lse_err is
    max |lse - ref| over rows with an allowed key, divided by max(1, max |ref|).
    """

    shape: Shape
    dtype: str
    distribution: str
    trial: int
    seed: int
    verdict: str
    reason: str = ""
    rel_err: float = math.nan
    rel_limit: float = math.nan
    max_abs: float = math.nan
    abs_limit: float = math.nan
    trivial_zero: float = math.nan
    trivial_mean: float = math.nan
    lse_err: float | None = None
    lse_limit: float = math.nan
    empty_rows: int = 0
    weak: bool = False

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.1e}"


@dataclass
class VerifyReport:
    spec: str
    impl: str
    device: str
    seed: int
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every case passed, and at least one case could tell a trivial
        output from a right one."""
        return bool(self.cases) and all(c.passed for c in self.cases) and not all(
            c.weak for c in self.cases)

    @property
    def failures(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def summary(self) -> str:
        n, ok = len(self.cases), sum(c.passed for c in self.cases)
        verdict = "PASS" if self.passed else "FAIL"
        line = (f"{verdict}: {self.impl} against spec {self.spec} on {self.device}: "
                f"{ok}/{n} cases pass (seed {self.seed})")
        if self.cases and all(c.weak for c in self.cases):
            line += "; no case tells a trivial output apart (tolerances too loose?)"
        return line

    def table(self) -> str:
        head = ("shape", "dtype", "dist", "rel err", "limit", "max abs", "limit",
                "triv 0/mean", "lse err", "empty", "verdict")
        rows = [head]
        for c in self.cases:
            verdict = c.verdict + (" (weak)" if c.weak and c.passed else "")
            rows.append((str(c.shape), c.dtype, c.distribution, _num(c.rel_err),
                         _num(c.rel_limit), _num(c.max_abs), _num(c.abs_limit),
                         f"{_num(c.trivial_zero)}/{_num(c.trivial_mean)}", _num(c.lse_err),
                         str(c.empty_rows), verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
                 for r in rows]
        for c in self.failures:
            lines.append(f"  {c.verdict}: {c.shape} {c.dtype} {c.distribution} trial {c.trial} "
                         f"(seed {c.seed}): {c.reason}")
        return "\n".join([self.summary(), *lines])

    def to_dict(self) -> dict:
        cases = []
        for c in self.cases:
            d = asdict(c)
            d["shape"] = asdict(c.shape)
            cases.append(d)
        return {"spec": self.spec, "impl": self.impl, "device": self.device, "seed": self.seed,
                "passed": self.passed, "cases": cases}
