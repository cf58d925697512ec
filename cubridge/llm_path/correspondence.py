"""The IR <-> CUDA correspondence a lift records: which CUDA line ranges each
IR method describes. The lowering stage maps changed IR methods to the CUDA
lines to edit through it.

    {"correspondence": [{"method": "attention", "ir_lines": [40, 120],
                         "cuda_lines": [[210, 388]], "what": "..."}],
     "workers": [...], "intrinsics": [...]}
"""

from __future__ import annotations

import ast
import json
from typing import Any

from cubridge.llm import ReplyParseError, code_block
from cubridge.llm.loop import Rejected
from cubridge.llm_path.programs import defined_functions


def parse_correspondence(reply: str) -> dict[str, Any]:
    text = code_block(reply, "json", pick="last")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReplyParseError(f"the ```json block is not valid JSON: line {exc.lineno}, "
                              f"column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("correspondence"), list):
        raise ReplyParseError('the ```json block must be an object with a "correspondence" list')
    return data


def bound_workers(source: str) -> list[str]:
    """Methods the program binds to warps (`self.bind(self.name, ...)`)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "bind" and node.args
                and isinstance(node.args[0], ast.Attribute)):
            names.append(node.args[0].attr)
    return names


def check_correspondence(data: dict[str, Any], ir_source: str, cuda_lines: int
                         ) -> list[dict[str, Any]]:
    """Validate every entry against the program and the CUDA file; Rejected
    with each problem otherwise. Returns the entries."""
    methods = defined_functions(ir_source)
    ir_len = len(ir_source.splitlines())
    problems: list[str] = []
    entries = data["correspondence"]
    for i, e in enumerate(entries, 1):
        where = f"correspondence entry {i}"
        if not isinstance(e, dict):
            problems.append(f"{where} is not an object")
            continue
        name = e.get("method")
        if name not in methods:
            problems.append(f"{where}: method {name!r} is not defined in the program "
                            f"(it defines {', '.join(sorted(methods))})")
        ir = e.get("ir_lines")
        if not (_is_range(ir) and 1 <= ir[0] <= ir[1] <= ir_len):
            problems.append(f"{where} ({name}): ir_lines {ir!r} must be [first, last] within "
                            f"the program's 1..{ir_len}")
        cuda = e.get("cuda_lines")
        if not (isinstance(cuda, list) and cuda and all(_is_range(r) for r in cuda)):
            problems.append(f"{where} ({name}): cuda_lines {cuda!r} must be a non-empty list "
                            "of [first, last] ranges")
        else:
            bad = [r for r in cuda if not 1 <= r[0] <= r[1] <= cuda_lines]
            if bad:
                problems.append(f"{where} ({name}): cuda_lines {bad} are outside the source's "
                                f"1..{cuda_lines} or reversed")
    covered = {e.get("method") for e in entries if isinstance(e, dict)}
    missing = [m for m in ["run", *bound_workers(ir_source)] if m in methods and m not in covered]
    if missing:
        problems.append(f"the correspondence has no entry for method(s) {', '.join(missing)}")
    if problems:
        raise Rejected("the correspondence is wrong:\n" + "\n".join(f"- {p}" for p in problems))
    return entries


def _is_range(r: object) -> bool:
    return (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)
            and r[0] <= r[1])


def render_correspondence(data: dict[str, Any] | None, changed: list[str] | None = None) -> str:
    """A table for the lowering prompt (changed methods marked)."""
    if not data:
        return ("(none recorded for this kernel: find the lines from the source; the CuIR "
                "program's comments name the CUDA regions)")
    lines = ["| IR method | CUDA lines | what | changed |", "|---|---|---|---|"]
    for e in data["correspondence"]:
        ranges = ", ".join(f"{a}-{b}" for a, b in e["cuda_lines"])
        mark = "yes" if changed and e["method"] in changed else ""
        lines.append(f"| {e['method']} | {ranges} | {e.get('what', '')} | {mark} |")
    return "\n".join(lines)
