"""Trusted entry points that run inside the sandbox process on a generated
CuIR module (`run_generated(source, entry="cubridge.llm_path.ir_check:...")`).

They find the module's one kernel class, run it with the executor against a
spec and return plain data (it crosses the process boundary pickled).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from cubridge.ir import KernelBase, attention_fn
from cubridge.ir.structure import diff_kernels, show
from cubridge.spec import load
from cubridge.spec.lengths import long_check_shapes
from cubridge.spec.shapes import fit_shapes, shapes_for
from cubridge.verify import verify

MAX_FAILURE_LINES = 8


def kernel_class(module: ModuleType) -> type[KernelBase]:
    """The one KernelBase subclass the module defines (imported ones do not count)."""
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, KernelBase) and obj is not KernelBase
             and obj.__module__ == module.__name__]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise ValueError(f"the program must define exactly one KernelBase subclass; "
                         f"found {len(found)} ({names})")
    return found[0]


def verify_program(module: ModuleType, spec_path: str, sizes: Sequence[tuple[int, int, int]],
                   trials: int = 1, seed: int | None = None, spec_lengths: bool = False
                   ) -> dict[str, Any]:
    """Execute the kernel (its default config) against the spec on CPU shapes
    built from `sizes` and the spec's reduced head configs, in the spec's first
    dtype; with `spec_lengths` also on the spec check's long case, and in
    every dtype of the spec. Returns {"kernel", "config", "passed", "summary",
    "table", "errors"}."""
    cls = kernel_class(module)
    spec = load(spec_path)
    try:
        config = cls().config()
    except TypeError as exc:
        raise ValueError(f"{cls.__name__}() must be constructible with its defaults: {exc}"
                         ) from None
    shapes = shapes_for(spec.configs, sizes)
    if spec_lengths:
        shapes += long_check_shapes(spec.configs, spec)
    shapes = fit_shapes(spec, shapes)
    report = verify(spec, attention_fn(cls), device="cpu",
                    dtypes=spec.dtypes if spec_lengths else [spec.dtypes[0]],
                    shapes=shapes, trials=trials, seed=seed, require_lse=spec.returns_lse)
    errors = [f"{c.verdict}: {c.shape} {c.dtype} {c.distribution}: {c.reason}"
              for c in report.failures[:MAX_FAILURE_LINES]]
    return {"kernel": cls.__name__, "config": config, "passed": report.passed,
            "summary": report.summary(), "table": report.table(), "errors": errors}


def describe_program(module: ModuleType, other: str | None = None) -> dict[str, Any]:
    """The kernel's outline (`cubridge ir show`), and with `other`
    ("package.module:Class", trusted) the structural diff other -> this."""
    cls = kernel_class(module)
    result: dict[str, Any] = {"kernel": cls.__name__, "outline": show(cls),
                              "config": cls().config()}
    if other is not None:
        mod_name, _, cls_name = other.partition(":")
        source = getattr(importlib.import_module(mod_name), cls_name)
        diff = diff_kernels(source, cls)
        result["diff"] = str(diff)
        result["hooks_only"] = diff.hooks_only
        result["changed"] = sorted({*diff.added, *diff.removed, *diff.changed})
    return result
