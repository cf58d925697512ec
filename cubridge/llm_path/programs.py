"""Checking a generated CuIR program: static allow-list, then the sandboxed
executor against a spec. Failures become `Rejected` with the precise error,
which the stage loop sends back to the model."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubridge.llm import SandboxLimits, code_block, run_generated
from cubridge.llm.loop import Rejected
from cubridge.llm_path.settings import StageSettings

IR_FILENAME = "target_cuir.py"


@dataclass
class VerifiedProgram:
    source: str
    kernel: str  # class name
    config: dict[str, Any]
    summary: str
    table: str


def sandbox_limits(settings: StageSettings) -> SandboxLimits:
    return SandboxLimits(timeout_s=settings.sandbox_timeout_s, threads=2)


def defined_functions(source: str) -> dict[str, tuple[int, int]]:
    """Method/function name -> (first line, last line) in the program."""
    tree = ast.parse(source)
    spans: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            spans.setdefault(node.name, (node.lineno, node.end_lineno or node.lineno))
    return spans


def verify_ir_source(source: str, spec_path: Path, settings: StageSettings, *,
                     filename: str = IR_FILENAME) -> VerifiedProgram:
    """Static check + sandboxed execution against the spec; Rejected on failure
    (StaticCheckError / SandboxError propagate: the loop feeds them back too)."""
    result = run_generated(
        source, filename=filename, entry="cubridge.llm_path.ir_check:verify_program",
        args=(str(Path(spec_path).resolve()), tuple(settings.ir_sizes), settings.ir_trials,
              settings.seed, settings.ir_spec_lengths),
        limits=sandbox_limits(settings))
    report = result.value
    if not report["passed"]:
        details = "\n".join(report["errors"]) or report["table"]
        raise Rejected(f"the CuIR program {report['kernel']} fails the spec when executed: "
                       f"{report['summary']}\n{details}")
    return VerifiedProgram(source, report["kernel"], report["config"], report["summary"],
                           report["table"])


def program_from_reply(reply: str, spec_path: Path, settings: StageSettings,
                       filename: str = IR_FILENAME) -> VerifiedProgram:
    """The reply's python block, checked and verified."""
    source = code_block(reply, "python", pick="last")
    return verify_ir_source(source, spec_path, settings, filename=filename)
