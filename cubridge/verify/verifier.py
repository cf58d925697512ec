"""`verify(spec, impl)`: differential testing of any attention implementation
against a spec (docs/specs.md, Verification)."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Sequence

import torch

from cubridge.attention import Shape, default_scale
from cubridge.spec import DISTRIBUTIONS, Spec, call_reference, make_inputs, verification_shapes
from cubridge.spec.loader import parse_dtype
from cubridge.spec.shapes import fit_shapes
from cubridge.verify.candidate import CallOutcome, ImplRef, impl_name, resolve_impl, run_candidate
from cubridge.verify.compare import judge
from cubridge.verify.isolation import IsolatedRunner
from cubridge.verify.report import CaseResult, VerifyReport

DEFAULT_TIMEOUT_S = 120.0


def verify(
    spec: Spec,
    impl: ImplRef,
    *,
    device: str = "cpu",
    dtypes: Sequence[torch.dtype | str] | None = None,
    shapes: Sequence[Shape] | None = None,
    distributions: Sequence[str] | None = None,
    trials: int = 1,
    seed: int | None = None,
    isolate: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    require_lse: bool = True,
    progress: Callable[[int, int, CaseResult], None] | None = None,
) -> VerifyReport:
    """Check `impl` against `spec` on fresh random inputs.

    impl: a callable impl(q, k, v, scale=None, **aux) -> out | (out, lse), or
      a 'module:func' string (a function marked with @impl_factory is called
      with the spec first). Inputs follow cubridge.attention's layouts.
    Every (shape, dtype, distribution) is run `trials` times, each on new
    inputs (seeded from `seed`, random if None; the report records it).
    Defaults: the spec's dtypes, verification_shapes(spec.configs), all of
    DISTRIBUTIONS. isolate=True runs the candidate in a worker process with
    a `timeout_s` limit per call; a crash or hang becomes a failed case.
    require_lse=False accepts candidates that return out only (e.g. SDPA).
    progress(done, total, case) is called after each case.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    dtypes = [parse_dtype(d) for d in (dtypes if dtypes is not None else spec.dtypes)]
    shapes = list(shapes) if shapes is not None else fit_shapes(
        spec, verification_shapes(spec.configs))
    distributions = list(distributions) if distributions is not None else list(DISTRIBUTIONS)
    unknown = [d for d in distributions if d not in DISTRIBUTIONS]
    if unknown:
        raise ValueError(f"unknown distributions {unknown}; known: {DISTRIBUTIONS}")
    seed = secrets.randbits(31) if seed is None else seed
    report = VerifyReport(spec.name, impl_name(impl), device, seed)

    call: Callable[[object, float], CallOutcome]
    runner = None
    if isolate:
        runner = IsolatedRunner(impl, spec.path, timeout_s)
        call = lambda inputs, scale: runner.call(inputs, scale, device)
    else:
        fn = resolve_impl(impl, lambda: spec)
        call = lambda inputs, scale: run_candidate(fn, inputs, scale, device)

    cases = list(itertools.product(shapes, dtypes, distributions, range(trials)))
    try:
        for index, (shape, dtype, dist, trial) in enumerate(cases):
            report.cases.append(_run_case(spec, call, shape, dtype, dist, trial, seed + index,
                                          require_lse, device))
            if progress is not None:
                progress(index + 1, len(cases), report.cases[-1])
    finally:
        if runner is not None:
            runner.close()
    return report


def _run_case(spec: Spec, call: Callable, shape: Shape, dtype: torch.dtype, dist: str,
              trial: int, case_seed: int, require_lse: bool, device: str) -> CaseResult:
    inputs = make_inputs(spec, shape, dtype, dist, torch.Generator().manual_seed(case_seed))
    # The reference sees its own float64 copy, computed before the candidate runs
    # (on the GPU when there is one: float64 on large shapes is slow on CPU).
    ref_device = device if device.startswith("cuda") else "cpu"
    ref_out, ref_lse = call_reference(spec, inputs.to_float64().to(ref_device),
                                      expect_lse=spec.returns_lse)
    ref_out = ref_out.cpu()
    ref_lse = ref_lse.cpu() if ref_lse is not None else None
    scale = spec.scale if spec.scale is not None else default_scale(shape.d)
    tol = spec.tolerances[dtype]
    case = CaseResult(shape, str(dtype).removeprefix("torch."), dist, trial, case_seed, "fail",
                      rel_limit=tol.rel, lse_limit=tol.lse)

    outcome = call(inputs, scale)
    if outcome.status != "ok":
        case.verdict, case.reason = outcome.status, outcome.message
        return case
    j = judge(outcome.out, outcome.lse, ref_out, ref_lse, inputs.v, dtype, tol,
              require_lse=require_lse and spec.returns_lse)
    if outcome.modified_inputs:
        j.fail(f"the candidate modified its inputs {outcome.modified_inputs}")
    case.verdict = "pass" if j.passed else "fail"
    case.reason = "; ".join(j.reasons)
    case.rel_err, case.max_abs, case.abs_limit = j.rel_err, j.max_abs, j.abs_limit
    case.trivial_zero, case.trivial_mean = j.trivial_zero, j.trivial_mean
    case.lse_err, case.empty_rows, case.weak = j.lse_err, j.empty_rows, j.weak
    return case
