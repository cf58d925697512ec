"""Judging one candidate output against the float64 reference
(docs/specs.md, Verification, which explains the thresholds)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cubridge.spec.model import Tolerance

# A case discriminates only if every trivial output (zeros, the mean of V)
# misses the reference by at least this many times the relative tolerance.
TRIVIAL_FACTOR = 10.0


@dataclass
class Judgement:
    passed: bool = True
    reasons: list[str] = field(default_factory=list)
    rel_err: float = float("nan")
    max_abs: float = float("nan")
    abs_limit: float = float("nan")
    trivial_zero: float = float("nan")
    trivial_mean: float = float("nan")
    lse_err: float | None = None  # None: no LSE compared
    empty_rows: int = 0
    weak: bool = False  # a trivial output would come within TRIVIAL_FACTOR of the tolerance

    def fail(self, reason: str) -> None:
        self.passed = False
        self.reasons.append(reason)


def _rel(x: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> float:
    """||x - ref|| / ||ref||, with ||ref|| raised to `floor` (see judge)."""
    denom = max(float(ref.norm()), floor)
    return float((x - ref).norm()) / (denom if denom > 0 else 1.0)


def _first(mask: torch.Tensor) -> str:
    return "(" + ", ".join(map(str, torch.nonzero(mask)[0].tolist())) + ")"


def mean_of_v(v: torch.Tensor, hq: int, sq: int) -> torch.Tensor:
    """The 'mean of V' trivial output: each KV head's mean value row, for
    every query row of its query heads."""
    mean = v.double().mean(dim=2, keepdim=True)  # [B, Hk, 1, Dv]
    mean = mean.repeat_interleave(hq // v.shape[1], dim=1)
    return mean.expand(-1, -1, sq, -1)


def judge(
    out: torch.Tensor, lse: torch.Tensor | None,
    ref_out: torch.Tensor, ref_lse: torch.Tensor | None,
    v: torch.Tensor, dtype: torch.dtype, tol: Tolerance, *, require_lse: bool,
) -> Judgement:
    """Compare a candidate's (out, lse) with the float64 reference."""
    j = Judgement()
    b, hq, sq, _ = ref_out.shape
    # The output is stored in `dtype`: below its smallest normal number (fp16:
    # 6.1e-5) no relative accuracy is possible, so a reference whose elements
    # all sit there (sigmoid of very negative scores) is judged on that floor.
    tiny = torch.finfo(dtype).tiny if dtype.is_floating_point else 0.0
    floor = tiny * max(1, ref_out.numel()) ** 0.5
    j.trivial_zero = _rel(torch.zeros_like(ref_out), ref_out, floor)
    j.trivial_mean = _rel(mean_of_v(v, hq, sq), ref_out, floor)
    j.weak = min(j.trivial_zero, j.trivial_mean) < TRIVIAL_FACTOR * tol.rel

    if tuple(out.shape) != tuple(ref_out.shape):
        j.fail(f"out has shape {tuple(out.shape)}, expected {tuple(ref_out.shape)}")
        return j
    if out.dtype != dtype:
        j.fail(f"out is {out.dtype}, expected {dtype}")
    out64 = out.double()
    finite = torch.isfinite(out64)
    all_finite = bool(finite.all())
    if not all_finite:
        j.fail(f"out has {int(torch.isnan(out64).sum())} NaN and "
               f"{int(torch.isinf(out64).sum())} Inf values, first at {_first(~finite)}")
        out64 = torch.where(finite, out64, torch.zeros((), dtype=torch.float64))
    j.rel_err = _rel(out64, ref_out, floor) if all_finite else float("inf")
    scale = float(ref_out.abs().max()) if ref_out.numel() else 0.0
    j.abs_limit = max(tol.abs * (scale if scale > 0 else 1.0), tiny)
    j.max_abs = float((out64 - ref_out).abs().max()) if all_finite else float("inf")
    if all_finite:
        if j.rel_err > tol.rel:
            j.fail(f"relative error {j.rel_err:.2e} > {tol.rel:.0e}")
        if j.max_abs > j.abs_limit:
            where = torch.unravel_index((out64 - ref_out).abs().argmax(), out.shape)
            j.fail(f"max abs error {j.max_abs:.2e} > {j.abs_limit:.2e} at "
                   f"{tuple(int(i) for i in where)}")

    if ref_lse is not None:
        empty = torch.isinf(ref_lse)
        j.empty_rows = int(empty.sum())
        if j.empty_rows and all_finite and (out64[empty] != 0).any():
            j.fail(f"rows with no allowed key must be 0; "
                   f"{int((out64[empty] != 0).any(-1).sum())} of {j.empty_rows} are not")
        _judge_lse(j, lse, ref_lse, tol, require_lse)
    return j


def _judge_lse(j: Judgement, lse: torch.Tensor | None, ref_lse: torch.Tensor, tol: Tolerance,
               require_lse: bool) -> None:
    if lse is None:
        if require_lse:
            j.fail("no lse returned (the spec has one; pass require_lse=False to skip it)")
        return
    if tuple(lse.shape) != tuple(ref_lse.shape):
        j.fail(f"lse has shape {tuple(lse.shape)}, expected {tuple(ref_lse.shape)}")
        return
    if lse.dtype != torch.float32:
        j.fail(f"lse is {lse.dtype}, expected torch.float32")
    lse = lse.double()
    bad = torch.isnan(lse) | (lse == float("inf"))
    if bad.any():
        j.fail(f"lse has {int(bad.sum())} NaN or +Inf values, first at {_first(bad)}")
        return
    empty_ref, empty = torch.isinf(ref_lse), torch.isinf(lse)
    if not torch.equal(empty, empty_ref):
        j.fail(f"lse is -inf on {int((empty & ~empty_ref).sum())} rows that have allowed keys "
               f"and finite on {int((~empty & empty_ref).sum())} rows that have none")
    both = ~empty & ~empty_ref
    if both.any():
        # A kernel's LSE error follows the size of its scores (fp32 sums of
        # q.k terms), not of each row's LSE, which can sit near 0 while its
        # scores are in the hundreds: measure it against the case's largest LSE.
        scale = max(1.0, float(ref_lse[both].abs().max()))
        j.lse_err = float((lse[both] - ref_lse[both]).abs().max()) / scale
        if j.lse_err > tol.lse:
            j.fail(f"lse error {j.lse_err:.2e} > {tol.lse:.0e}")
    else:
        j.lse_err = 0.0
