"""Rule-based transfer, end to end: spec -> verified target CuIR.

    result = transfer_by_rules(spec, FaSm80, out_dir=run_dir)
    result.target       # the Target class (hook-only subclass of FaSm80)
    result.path         # run_dir / "target_cuir.py", the program that was verified
    result.plan         # the hook plan that lowering turns into CUDA

The target is verified by the CuIR executor against the spec's reference
before anything is lowered. A spec whose reference its mods do not express
(cosine attention, other head dims...) fails that check and raises
`NotHookConfined`: it needs the LLM-driven transfer.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cubridge.attention import Shape
from cubridge.ir import attention_fn
from cubridge.spec.model import Spec
from cubridge.spec.shapes import fit_shapes
from cubridge.transfer.hooks import HookPlan, plan_hooks
from cubridge.transfer.target import load_target, write_target
from cubridge.verify import verify

TARGET_FILE = "target_cuir.py"


class NotHookConfined(Exception):
    """The spec differs from the source kernel outside the hook points."""


@dataclass(frozen=True)
class RuleTransfer:
    plan: HookPlan
    path: Path
    target: type
    report: Any  # cubridge.verify.VerifyReport
    seconds: float

    def summary(self) -> str:
        cases = len(self.report.cases)
        return (f"transfer (rules): {self.plan.name} -> {self.target.__bases__[0].__name__} "
                f"subclass, hooks only, blocks by {self.plan.classification}; verified on "
                f"{cases} cases in {self.seconds:.1f}s")


def default_shapes(spec: Spec) -> list[Shape]:
    """Small CPU shapes with tails, Sq != Sk both ways and each config's GQA ratio;
    one long enough for 1024-token windows."""
    out = []
    for cfg in spec.configs:
        g = cfg.hq // cfg.hk
        out += [Shape(2, 2 * g, 2, 65, 200, 32), Shape(1, g, 1, 130, 77, 32)]
    cfg = spec.configs[0]
    out.append(Shape(1, cfg.hq // cfg.hk, 1, 1100, 1037, 32))
    return fit_shapes(spec, out)


def transfer_by_rules(spec: Spec, base: type, *, out_dir: str | Path | None = None,
                      shapes: Sequence[Shape] | None = None,
                      config: Mapping[str, Any] | None = None, seed: int = 0,
                      plan: HookPlan | None = None) -> RuleTransfer:
    """Generate the hook-only target of `spec` on `base`, write it and verify it
    with the executor (`config`: the base kernel's constructor arguments;
    `plan`: the spec's hook plan when the caller traced it already)."""
    start = time.perf_counter()
    plan = plan if plan is not None else plan_hooks(spec)
    out_dir = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="cubridge-"))
    path = write_target(plan, base, out_dir / TARGET_FILE)
    target = load_target(path)
    dtype = torch.bfloat16 if torch.bfloat16 in spec.dtypes or not spec.dtypes else \
        spec.dtypes[0]
    report = verify(spec, plan.supplying_captured(attention_fn(target, **dict(config or {}))),
                    shapes=list(shapes) if shapes is not None else default_shapes(spec),
                    dtypes=[dtype], distributions=["normal"], seed=seed,
                    require_lse=spec.returns_lse)
    if not report.passed:
        failed = next(c for c in report.cases if c.verdict != "pass")
        raise NotHookConfined(
            f"spec {spec.name!r}: the hook-only target on {base.__name__} does not compute the "
            f"reference ({failed.reason}); its mods do not express the variant, so it needs "
            f"the LLM-driven transfer. Target kept at {path}")
    return RuleTransfer(plan, path, target, report, time.perf_counter() - start)
