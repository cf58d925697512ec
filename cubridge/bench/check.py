"""The correctness gate in front of every timing: an output counts only if it
matches the float64 reference within the spec's tolerance for its dtype.

(The full differential tester is cubridge.verify; this is the one-shot check of
the benchmark's own inputs, so a fast wrong answer is never reported as fast.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cubridge.spec.model import Spec, Tolerance
from cubridge.spec.tolerances import DEFAULT_TOLERANCES


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


def check_output(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Check:
    """Compare out with the float64 reference: shape, finiteness, rel Frobenius
    error, and max abs error as a fraction of max |ref| (Tolerance's meaning).
    A zeros output has rel error 1, far above any tolerance."""
    if tuple(out.shape) != tuple(ref.shape):
        return Check(False, None, None, f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.device != ref.device:
        return Check(False, None, None, f"output on {out.device}, inputs on {ref.device}")
    out64 = out.to(torch.float64)
    bad = int((~torch.isfinite(out64)).sum())
    if bad:
        return Check(False, None, None, f"{bad} NaN/Inf values in the output")
    diff = out64 - ref
    rel = float(diff.norm() / ref.norm().clamp_min(1e-30))
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    ref_max = float(ref.abs().max()) if ref.numel() else 0.0
    if rel > tol.rel:
        return Check(False, rel, max_abs, f"rel err {rel:.2e} > {tol.rel:.0e}")
    if max_abs > tol.abs * max(ref_max, 1e-30):
        return Check(False, rel, max_abs, f"max abs err {max_abs:.2e} > {tol.abs:.0e} * "
                     f"max|ref| ({ref_max:.2e})")
    return Check(True, rel, max_abs)
