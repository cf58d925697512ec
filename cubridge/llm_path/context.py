"""What each stage's prompt shows besides its task: the parts of the CuIR
manual a program uses, the spec helpers a reference calls, the aux tensors as
the kernel receives them, the launch ABI a CUDA edit may use, and the CUDA
regions an IR method maps to. Each is built from the code it describes, so a
prompt never drifts from the kernel or the spec it talks about.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cubridge.ir import docgen
from cubridge.llm import number_lines
from cubridge.spec import helpers as spec_helpers
from cubridge.spec.model import Spec

COMMON_DIR = Path(__file__).resolve().parents[1] / "kernels" / "common"
REGION_CONTEXT = 2  # source lines shown around each mapped region


# -- CuIR ------------------------------------------------------------------------------------

def names_used(sources: Iterable[str]) -> set[str]:
    """Attribute and function names a program calls or reads (`self.alloc`,
    `tm.row_max`, `q_s.rows`...): the manual entries it needs in full."""
    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Name):
                names.add(node.id)
    return names


def manual_for(sources: Sequence[str]) -> str:
    """The CuIR reference with the entries `sources` use in full (and the
    hooks, where variants differ), every other entry in one line."""
    return docgen.render_reference(names_used(sources) | {"cols", "rows"})


def base_classes(source: str) -> list[str]:
    """Sources of the cubridge.ir modules whose classes the program derives
    from, beyond KernelBase (e.g. cubridge.ir.attention's AttentionKernelBase)."""
    tree = ast.parse(source)
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "cubridge.ir."):
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
    bases = {b.id for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for b in n.bases
             if isinstance(b, ast.Name)}
    modules = sorted({imported[b] for b in bases if b in imported})
    import importlib

    return [inspect.getsource(importlib.import_module(m)) for m in modules]


# -- the spec ------------------------------------------------------------------------------

def helpers_used(spec_source: str) -> str:
    """Source of the cubridge.spec.helpers functions the spec calls."""
    names = [n for n in names_used([spec_source])
             if callable(getattr(spec_helpers, n, None))
             and getattr(getattr(spec_helpers, n), "__module__", "") == spec_helpers.__name__]
    if not names:
        return ""
    order = sorted(names, key=lambda n: inspect.getsourcelines(getattr(spec_helpers, n))[1])
    return "\n\n".join(inspect.getsource(getattr(spec_helpers, n)).rstrip() for n in order)


def aux_tensors(spec: Spec) -> list[dict[str, Any]]:
    """The aux tensors as the kernel receives them: slot (make_aux's order),
    name, declared dims, dtype and rank."""
    from cubridge.transfer.hooks import example_aux

    declared = spec.aux_shapes or {}
    return [{"slot": i, "name": name, "dtype": str(t.dtype).removeprefix("torch."),
             "rank": t.dim(), "dims": declared.get(name)}
            for i, (name, t) in enumerate(example_aux(spec).items())]


def _dims(dims: Any, rank: int) -> str:
    if dims is None:
        return f"rank {rank}"
    return "[" + ", ".join(str(d) for d in dims) + "]" if dims else "scalar (0-d)"


def aux_table(spec: Spec, *, cuda: bool) -> str:
    """A markdown table of the aux tensors (with the CUDA read where `cuda`)."""
    rows = aux_tensors(spec)
    if not rows:
        return "(none: the spec's reference takes no aux tensors)"
    head = "| slot | name | dims | dtype the kernel receives |"
    sep = "|---|---|---|---|"
    if cuda:
        head += " read in CUDA |"
        sep += "---|"
    out = [head, sep]
    for r in rows:
        line = f"| {r['slot']} | `{r['name']}` | {_dims(r['dims'], r['rank'])} | {r['dtype']} |"
        if cuda:
            ctype = {"float32": "float", "int32": "int", "int64": "int64_t", "bool": "bool",
                     "float16": "__half", "bfloat16": "__nv_bfloat16"}.get(r["dtype"], "?")
            idx = ", ".join(f"i{k}" for k in range(max(r["rank"], 1))) if r["rank"] else "0"
            line += f" `aux_load<{ctype}>(p.aux, {r['slot']}, {idx})` |"
        out.append(line)
    return "\n".join(out)


# -- the launch ABI --------------------------------------------------------------------------

_BLOCK_COMMENT = re.compile(r"^(//.*\n)+", re.MULTILINE)


def header_excerpt(name: str, start: str, end: str | None = None) -> str:
    """Lines of kernels/common/`name` from the first containing `start` up to
    (not including) the first after it containing `end`."""
    lines = (COMMON_DIR / name).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if start in line)
    last = len(lines)
    if end is not None:
        last = next((i for i in range(first + 1, len(lines)) if end in lines[i]), len(lines))
    return "\n".join(lines[first:last]).rstrip()


def device_signatures(header: str) -> str:
    """The declarations of a primitives header's device functions, with the
    comment above each (bodies left out)."""
    text = (COMMON_DIR / header).read_text()
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "__device__" in line and "(" in line and not line.lstrip().startswith("//"):
            j = i
            comment: list[str] = []
            while j > 0 and lines[j - 1].lstrip().startswith("//"):
                j -= 1
                comment.insert(0, lines[j])
            if i > 0 and lines[i - 1].lstrip().startswith("template"):
                comment.append(lines[i - 1])
            sig = [line]
            while "{" not in sig[-1] and ";" not in sig[-1] and i + 1 < len(lines):
                i += 1
                sig.append(lines[i])
            decl = "\n".join(sig)
            decl = decl.split("{")[0].rstrip() + ";"
            out += [*comment, decl, ""]
        i += 1
    return "\n".join(out).rstrip()


def launch_abi(kernel: Any) -> str:
    """What a CUDA edit may use to reach its inputs: FwdParams, AuxArgs and
    the aux readers (hook_types.cuh), and the kernel's primitives."""
    parts = [
        "```cuda",
        "// fwd_params.cuh: the kernel's parameters (`p` in the kernel)",
        header_excerpt("fwd_params.cuh", "template <typename Element>", "}  // namespace"),
        "",
        "// hook_types.cuh: how aux tensors reach the kernel",
        header_excerpt("hook_types.cuh", "constexpr int kMaxAux", "// Staged reads"),
        "",
        header_excerpt("hook_types.cuh", "// Typed element read of aux tensor", "}  // namespace"),
        "```",
    ]
    source = Path(kernel.source).read_text()
    for header in ("sm80_primitives.cuh", "sm90_primitives.cuh", "fragment_math.cuh"):
        if f'#include "{header}"' in source:
            parts += ["", f"Device functions of `{header}` (bodies left out):", "", "```cuda",
                      device_signatures(header), "```"]
    return "\n".join(parts)


# -- CUDA regions ----------------------------------------------------------------------------

def merge_ranges(ranges: Iterable[Sequence[int]], context: int, last: int
                 ) -> list[tuple[int, int]]:
    spans = sorted((max(1, a - context), min(last, b + context)) for a, b in ranges)
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def source_regions(source: str, ranges: Iterable[Sequence[int]], *, always: Sequence[
        Sequence[int]] = (), context: int = REGION_CONTEXT) -> str:
    """The numbered lines of `source` in `ranges` (plus `always`, and
    `context` lines around each), the gaps marked with the lines left out."""
    lines = source.splitlines()
    spans = merge_ranges([*ranges, *always], context, len(lines))
    numbered = number_lines(source).splitlines()
    out: list[str] = []
    prev = 0
    for a, b in spans:
        if a > prev + 1:
            out.append(f"      ... (lines {prev + 1}-{a - 1} not shown)")
        out += numbered[a - 1:b]
        prev = b
    if prev < len(lines):
        out.append(f"      ... (lines {prev + 1}-{len(lines)} not shown)")
    return "```cuda\n" + "\n".join(out) + "\n```"


def method_sources(source: str, names: Iterable[str]) -> str:
    """The text of the named functions/methods of a program, in file order."""
    wanted = set(names)
    lines = source.splitlines()
    found: list[tuple[int, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found.append((start, node.end_lineno or node.lineno))
    found.sort()
    return "\n\n".join("\n".join(lines[a - 1:b]) for a, b in found)
