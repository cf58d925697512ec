"""The correctness gate in front of every timing: an output counts only if the
verifier's judgement (cubridge.verify.compare.judge: shape, dtype, NaN/Inf, rel
Frobenius error, max abs error relative to max |ref|) passes with the spec's
tolerance for its dtype. Peers return no LSE, so out alone is judged here."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cubridge.spec.model import Spec, Tolerance
from cubridge.spec.tolerances import DEFAULT_TOLERANCES
from cubridge.verify.compare import judge


@dataclass(frozen=True)
class Check:
    ok: bool
    rel_err: float | None
    max_abs: float | None
    reason: str = ""


def tolerance_for(spec: Spec, dtype: torch.dtype) -> Tolerance:
    if dtype in spec.tolerances:
        return spec.tolerances[dtype]
    if dtype in DEFAULT_TOLERANCES:
        return DEFAULT_TOLERANCES[dtype]
    raise ValueError(f"spec {spec.name!r} has no tolerance for {dtype}")


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def check_output(out: torch.Tensor, ref: torch.Tensor, v: torch.Tensor,
                 tol: Tolerance) -> Check:
    """Judge out (in v's dtype) against the float64 reference."""
    if not isinstance(out, torch.Tensor):
        return Check(False, None, None, f"returned {type(out).__name__}, not a tensor")
    if out.device != ref.device:
        return Check(False, None, None, f"output on {out.device}, inputs on {ref.device}")
    j = judge(out, None, ref, None, v, v.dtype, tol, require_lse=False)
    reason = "; ".join(j.reasons)
    if not j.passed and (rows := _only_empty_rows_differ(out, ref, v, tol)):
        reason += (f" (only on the {rows} query rows with no allowed key, which the spec "
                   "sets to 0 and this implementation does not)")
    return Check(j.passed, _finite_or_none(j.rel_err), _finite_or_none(j.max_abs), reason)


def _only_empty_rows_differ(out: torch.Tensor, ref: torch.Tensor, v: torch.Tensor,
                            tol: Tolerance) -> int:
    """The number of query rows with no allowed key (the reference's rows of zeros),
    where out passes with those rows set to the reference's; 0 otherwise. What an
    implementation returns on a row it may attend nowhere (varlen padding) is its own
    convention (the mean of V, NaN, 0), a difference a report should name rather than
    call a wrong kernel."""
    if out.shape != ref.shape or out.dim() < 2:
        return 0
    empty = (ref == 0).all(dim=-1, keepdim=True)
    if not bool(empty.any()):
        return 0
    patched = torch.where(empty, ref.to(out.dtype), out)
    if not judge(patched, None, ref, None, v, v.dtype, tol, require_lse=False).passed:
        return 0
    return int(empty.sum())
