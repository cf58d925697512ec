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
from pathlib import Path
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


def mapped_ranges(data: dict[str, Any] | None, methods: list[str]) -> list[list[int]]:
    """The CUDA ranges the named methods map to."""
    if not data:
        return []
    return [r for e in data["correspondence"] if e["method"] in methods for r in e["cuda_lines"]]


# -- the library's recorded correspondences ---------------------------------------------------
#
# Each library entry keeps the lift of its kernel beside it (correspondence.json):
# per IR method, the file that defines it (the entry's cuir.py, or the shared
# cubridge/ir modules its class inherits from), its lines there and the CUDA line
# ranges it describes, each range with the text of its first and last line (with
# its indentation: a function's closing brace is not a nested block's). The texts
# make staleness checkable: an edit of the CUDA or the CuIR that moves a recorded
# line is caught (`stale_entries`), and `refresh` relocates the ranges by their
# texts for a person to review. Records whose anchors were stripped of their
# indentation still match, by the stripped text.

REPO_ROOT = Path(__file__).resolve().parents[2]
CORRESPONDENCE_FILE = "correspondence.json"


def _method_span(ir_file: str, method: str) -> tuple[int, int] | None:
    """Lines of `method` in `ir_file`: in a class that defines `run` (the
    kernel) first, then anywhere (nested workers, helpers of the base class)."""
    path = REPO_ROOT / ir_file
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        if "run" in methods and method in methods:
            f = methods[method]
            return f.lineno, f.end_lineno or f.lineno
    return defined_functions(path.read_text()).get(method)


def dumps(data: dict[str, Any]) -> str:
    """The record as JSON, one line per entry (diffs stay readable)."""
    entries = ",\n  ".join(json.dumps(e) for e in data["correspondence"])
    return (f'{{"kernel_source": {json.dumps(data["kernel_source"])},\n'
            f' "correspondence": [\n  {entries}\n ]}}\n')


def _line(lines: list[str], n: int) -> str:
    return lines[n - 1].rstrip() if 1 <= n <= len(lines) else ""


def _matches(line: str, anchor: str) -> bool:
    """A line is its anchor's text, indentation included (an anchor recorded
    without indentation, by an older record, matches by the stripped text)."""
    line = line.rstrip()
    return line == anchor or (anchor == anchor.lstrip() and line.strip() == anchor)


def stale_entries(data: dict[str, Any], cuda_source: str) -> list[str]:
    """What in a recorded correspondence no longer matches the CUDA source or
    the CuIR files ([] when it is current)."""
    lines = cuda_source.splitlines()
    problems: list[str] = []
    for e in data["correspondence"]:
        name = e["method"]
        span = _method_span(e["ir_file"], name)
        if span is None:
            problems.append(f"{name}: no longer defined in {e['ir_file']}")
        elif list(span) != list(e["ir_lines"]):
            problems.append(f"{name}: now at lines {span[0]}-{span[1]} of {e['ir_file']}, "
                            f"recorded {e['ir_lines'][0]}-{e['ir_lines'][1]}")
        for (a, b), (first, last) in zip(e["cuda_lines"], e["anchors"], strict=True):
            if not (_matches(_line(lines, a), first) and _matches(_line(lines, b), last)):
                problems.append(f"{name}: CUDA lines {a}-{b} no longer start with {first!r} "
                                f"and end with {last!r}")
    return problems


def record(entries: list[dict[str, Any]], cuda_source: str, kernel_source: str
           ) -> dict[str, Any]:
    """A correspondence record from entries {method, ir_file, cuda_lines, what}:
    each method's current lines and each range's first and last line."""
    lines = cuda_source.splitlines()
    out = []
    for e in entries:
        span = _method_span(e["ir_file"], e["method"])
        if span is None:
            raise ValueError(f"{e['method']} is not defined in {e['ir_file']}")
        for a, b in e["cuda_lines"]:
            if not 1 <= a <= b <= len(lines):
                raise ValueError(f"{e['method']}: CUDA lines {a}-{b} outside 1..{len(lines)}")
        out.append({"method": e["method"], "ir_file": e["ir_file"], "ir_lines": list(span),
                    "cuda_lines": [list(r) for r in e["cuda_lines"]],
                    "anchors": [[_line(lines, a), _line(lines, b)] for a, b in e["cuda_lines"]],
                    "what": e["what"]})
    return {"kernel_source": kernel_source, "correspondence": out}


def _nearest(lines: list[str], text: str, near: int, lo: int = 1) -> int | None:
    """The line at or after `lo` nearest `near` whose text is the anchor's, the
    indentation included where any line has it so (else by the stripped text)."""
    exact = [i + 1 for i, line in enumerate(lines) if line.rstrip() == text and i + 1 >= lo]
    hits = exact or [i + 1 for i, line in enumerate(lines)
                     if _matches(line, text) and i + 1 >= lo]
    return min(hits, key=lambda n: abs(n - near)) if hits else None


def refresh(data: dict[str, Any], cuda_source: str) -> tuple[dict[str, Any], list[str]]:
    """Relocate each range by its first and last line's text (the occurrence
    nearest the recorded line) and re-read the methods' IR lines. Returns the
    new record and what could not be relocated (those entries need a new lift)."""
    lines = cuda_source.splitlines()
    lost: list[str] = []
    entries = []
    kept: dict[str, dict[str, Any]] = {}  # entries with a lost range, as recorded
    for e in data["correspondence"]:
        ranges = []
        for (a, b), (first, last) in zip(e["cuda_lines"], e["anchors"], strict=True):
            na = _nearest(lines, first, a)
            nb = _nearest(lines, last, b + (na - a if na else 0), lo=na or 1)
            if na is None or nb is None:
                lost.append(f"{e['method']}: lines {a}-{b} ({first!r} .. {last!r})")
                kept[e["method"]] = e
                ranges.append([a, b])
            else:
                ranges.append([na, nb])
        entries.append({**e, "cuda_lines": ranges})
    try:
        new = record(entries, cuda_source, data["kernel_source"])
    except ValueError as exc:
        return data, [*lost, str(exc)]
    # A range that could not be relocated keeps its old anchors, so that `check`
    # goes on failing until it is lifted again (re-anchoring it to whatever text now
    # sits at the old lines would pass a wrong mapping).
    new["correspondence"] = [kept.get(e["method"], e) for e in new["correspondence"]]
    return new, lost


def library_correspondence_path(kernel: Any) -> Path:
    return Path(kernel.directory) / CORRESPONDENCE_FILE


def main(argv: list[str] | None = None) -> int:
    """python -m cubridge.llm_path.correspondence check|refresh [KERNEL...]"""
    import argparse
    import sys

    from cubridge.kernels import get_kernel, list_kernels

    parser = argparse.ArgumentParser(prog="python -m cubridge.llm_path.correspondence",
                                     description="check or refresh the library kernels' "
                                     "recorded IR <-> CUDA correspondences")
    parser.add_argument("action", choices=["check", "refresh"])
    parser.add_argument("kernels", nargs="*", help="kernel names (default: every entry)")
    args = parser.parse_args(argv)
    kernels = [get_kernel(n) for n in args.kernels] if args.kernels else list_kernels()
    status = 0
    for kernel in kernels:
        path = library_correspondence_path(kernel)
        if not path.is_file():
            print(f"{kernel.name}: no {CORRESPONDENCE_FILE}", file=sys.stderr)
            status = 1
            continue
        data = json.loads(path.read_text())
        source = kernel.source.read_text()
        if args.action == "check":
            problems = stale_entries(data, source)
            for p in problems:
                print(f"{kernel.name}: {p}", file=sys.stderr)
            status |= bool(problems)
            if not problems:
                print(f"{kernel.name}: current ({len(data['correspondence'])} methods)")
            continue
        new, lost = refresh(data, source)
        path.write_text(dumps(new))
        for p in lost:
            print(f"{kernel.name}: could not relocate {p}", file=sys.stderr)
        print(f"{kernel.name}: refreshed {path} (review the diff)")
        status |= bool(lost)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
