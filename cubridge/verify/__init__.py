"""Differential testing of any attention implementation against a spec:
`verify(spec, impl)` returns a VerifyReport (docs/specs.md, Verification)."""

from cubridge.verify.candidate import CallOutcome, impl_factory, run_candidate
from cubridge.verify.compare import TRIVIAL_FACTOR, judge
from cubridge.verify.report import CaseResult, VerifyReport
from cubridge.verify.verifier import verify

__all__ = [
    "TRIVIAL_FACTOR", "CallOutcome", "CaseResult", "VerifyReport", "impl_factory", "judge",
    "run_candidate", "verify",
]
