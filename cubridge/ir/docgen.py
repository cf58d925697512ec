"""Generate docs/cuir.md, the CuIR manual, from the primitives' docstrings.

    python -m cubridge.ir.docgen          # rewrite docs/cuir.md
    python -m cubridge.ir.docgen --check  # exit 1 if docs/cuir.md is stale

Nothing in the manual is written by hand here except section titles and the
order: every signature and description comes from the code, and the two
reference programs are included verbatim as worked examples.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from cubridge.ir import (
    checks,
    control,
    errors,
    executor,
    hooks,
    kernel,
    limits,
    memory,
    scheduler,
    sync,
    tile_math,
)

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "cuir.md"
KB = kernel.KernelBase

# (title, module whose docstring opens the section, entries)
SECTIONS: list[tuple[str, Any, list[tuple[str, Any]]]] = [
    ("Kernels", kernel, [
        ("KernelBase", KB), ("KernelBase.grid", KB.grid), ("KernelBase.run", KB.run),
        ("KernelBase.config", KB.config), ("KernelBase.arch", None),
    ]),
    ("Memory", memory, [
        ("Space", memory.Space), ("KernelBase.alloc", KB.alloc), ("Tile", memory.Tile),
        ("Tile.rows", memory.Tile.rows), ("Tile.cols", memory.Tile.cols),
        ("Global", memory.Global),
        ("Global.tile", memory.Global.tile), ("GlobalTile", memory.GlobalTile),
        ("KernelBase.copy", KB.copy), ("KernelBase.copy_async", KB.copy_async),
        ("KernelBase.copy_commit", KB.copy_commit), ("KernelBase.copy_wait", KB.copy_wait),
        ("KernelBase.load", KB.load), ("KernelBase.store", KB.store),
    ]),
    ("Compute", None, [
        ("KernelBase.gemm", KB.gemm), ("KernelBase.gemm_async", KB.gemm_async),
        ("KernelBase.commit", KB.commit), ("KernelBase.wait_group", KB.wait_group),
    ]),
    ("Sync", sync, [
        ("KernelBase.barrier", KB.barrier), ("KernelBase.barriers", KB.barriers),
        ("Barrier", sync.Barrier), ("Barrier.arrive", sync.Barrier.arrive),
        ("Barrier.arrive_expect_tx", sync.Barrier.arrive_expect_tx),
        ("Barrier.expect_tx", sync.Barrier.expect_tx), ("Barrier.wait", sync.Barrier.wait),
        ("Barrier.try_wait", sync.Barrier.try_wait),
        ("KernelBase.named_barrier", KB.named_barrier), ("NamedBarrier", sync.NamedBarrier),
        ("NamedBarrier.sync", sync.NamedBarrier.sync),
        ("NamedBarrier.arrive", sync.NamedBarrier.arrive),
        ("KernelBase.sync_threads", KB.sync_threads),
    ]),
    ("Control", control, [
        ("KernelBase.bind", KB.bind), ("PipelineState", control.PipelineState),
        ("cdiv", control.cdiv),
    ]),
    ("Tile math", tile_math, [
        (f"tile_math.{n}", getattr(tile_math, n)) for n in
        ("full", "iota", "row_max", "row_sum", "exp2", "log", "log2", "maximum", "where",
         "convert")
    ] + [("tile_math.LOG2E", None), ("tile_math.LN2", None)]),
    ("Hooks", hooks, [
        ("BlockKind", hooks.BlockKind), ("KernelBase.causal", None),
        ("KernelBase.normalizer", None),
        ("KernelBase.aux_names", None), ("KernelBase.empty_row_score", None),
        ("KernelBase.score_mod", KB.score_mod), ("KernelBase.mask_mod", KB.mask_mod),
        ("KernelBase.activation", KB.activation),
        ("KernelBase.kv_block_range", KB.kv_block_range),
        ("KernelBase.block_kind", KB.block_kind),
        ("KernelBase.has_score_mod", KB.has_score_mod),
        ("KernelBase.has_mask_mod", KB.has_mask_mod),
        ("KernelBase.kv_blocks", KB.kv_blocks),
        ("KernelBase.apply_score_hooks", KB.apply_score_hooks),
    ]),
    ("Executing and checking", (executor, scheduler), [
        ("execute", executor.execute), ("attention_fn", executor.attention_fn),
        ("check", checks.check),
    ]),
    ("Errors", errors, [
        (n, getattr(errors, n)) for n in ("CuIRError", "HazardError", "DeadlockError",
                                          "SyncError", "StaticCheckError", "RaceError",
                                          "ProgramError")
    ]),
]

ATTRIBUTE_DOCS = {
    "KernelBase.arch": ("arch: str = 'sm80'", KB, "arch"),
    "KernelBase.causal": ("causal: bool = False", hooks.HookDefaults, "causal"),
    "KernelBase.normalizer": ("normalizer: str = 'softmax'", hooks.HookDefaults, "normalizer"),
    "KernelBase.aux_names": ("aux_names: tuple[str, ...] = ()", hooks.HookDefaults, "aux_names"),
    "KernelBase.empty_row_score": ("empty_row_score: float | None = None", hooks.HookDefaults,
                                   "empty_row_score"),
    "tile_math.LOG2E": ("LOG2E = log2(e)", tile_math, "LOG2E"),
    "tile_math.LN2": ("LN2 = ln(2)", tile_math, "LN2"),
}

KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"


def examples() -> list[tuple[str, str]]:
    """(title, module): the attention base class the library's programs share,
    then the CuIR programs in the kernel library's directories."""
    return [("the shared attention numerics: cubridge/ir/attention.py", "cubridge.ir.attention"),
            *[(f"{p.parent.name}: cubridge/kernels/{p.parent.name}/cuir.py",
               f"cubridge.kernels.{p.parent.name}.cuir")
              for p in sorted(KERNELS_DIR.glob("*/cuir.py"))]]


def _attribute_doc(owner: Any, name: str) -> str:
    """The string literal right after `name = ...` in owner's source (attribute docstring)."""
    tree = ast.parse(inspect.getsource(owner))
    for body in [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        for i, node in enumerate(body[:-1]):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                nxt = body[i + 1]
                if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                    return inspect.cleandoc(str(nxt.value.value))
    return ""


SHOW_CONSTRUCTOR = ("PipelineState",)


def _params(fn: Any) -> str:
    """A signature without `self`, annotations unquoted, keyword-only marked."""
    parts: list[str] = []
    star_done = False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, star_done = "*" + p.name, True
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name
        elif p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.annotation is not inspect.Parameter.empty:
            text += f": {p.annotation}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    return ", ".join(parts)


def _signature(name: str, obj: Any) -> str:
    short = name.split(".")[-1]
    if isinstance(obj, property):
        return f"{short}: bool (property)"
    if inspect.isclass(obj):
        if issubclass(obj, enum.Enum):
            return f"class {short}: " + ", ".join(m.name for m in obj)
        if short in SHOW_CONSTRUCTOR:
            return f"class {short}({_params(obj.__init__)})"
        return f"class {short}"
    ret = inspect.signature(obj).return_annotation
    ret_s = "" if ret is inspect.Signature.empty else f" -> {ret}"
    return f"{short}({_params(obj)}){ret_s}"


def _intro() -> list[str]:
    return [
        inspect.getdoc(sys.modules["cubridge.ir"]) or "",
        "",
        "Import what a program needs from `cubridge.ir` (`KernelBase`, `SMEM`, `RMEM`, "
        "`BlockKind`, `PipelineState`, `tile_math`...). Shared memory limits: "
        + ", ".join(f"{a}: {b // 1024} KB per CTA" for a, b in limits.SMEM_LIMIT.items())
        + f"; every SMEM buffer is rounded up to {limits.SMEM_ALIGN} bytes and every mbarrier "
        f"takes {limits.BARRIER_BYTES} bytes.",
        "",
    ]


def _entry(name: str, obj: Any) -> tuple[str, str]:
    """(heading, description) of one manual entry."""
    if obj is None:
        header, owner, attr = ATTRIBUTE_DOCS[name]
        return header, _attribute_doc(owner, attr)
    doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj) or ""
    where = name.rsplit(".", 1)[0] + "." if "." in name else ""
    return f"{where}{_signature(name, obj)}", doc


def _section_docs(module: Any) -> list[str]:
    out: list[str] = []
    for mod in module if isinstance(module, tuple) else (module,):
        if mod is not None and inspect.getdoc(mod):
            out += [inspect.getdoc(mod) or "", ""]
    return out


# Sections about running and checking programs: what a program's author does not call.
TOOLING_SECTIONS = ("Executing and checking",)
# Always in full where a program is written for a variant: the hooks are where it differs.
FULL_SECTIONS = ("Hooks",)


def render_reference(detailed: set[str] | None = None) -> str:
    """The manual's reference for writing a program, without the worked
    examples and the tooling sections. `detailed`: short names (`alloc`,
    `rows`, `row_max`...) whose entries appear in full; every other entry is
    one line (its signature and first sentence), except the Hooks section,
    always in full. None: every entry in full."""
    out = ["# CuIR reference", "", *_intro()]
    for title, module, entries in SECTIONS:
        if title in TOOLING_SECTIONS:
            continue
        full_section = detailed is None or title in FULL_SECTIONS
        out += [f"## {title}", ""]
        if full_section:
            out += _section_docs(module)
        brief: list[str] = []
        for name, obj in entries:
            heading, doc = _entry(name, obj)
            if full_section or name.split(".")[-1] in detailed:
                out += [f"### `{heading}`", "", doc, ""]
            else:
                first = doc.split("\n\n")[0].replace("\n", " ")
                first = first.split(". ")[0].rstrip(".")
                brief.append(f"- `{heading}`: {first}.")
        if brief:
            out += ["Also (one line each):", "", *brief, ""]
    return "\n".join(out).rstrip() + "\n"


def render() -> str:
    out = [
        "# CuIR manual",
        "",
        "<!-- generated by `python -m cubridge.ir.docgen` from the docstrings in cubridge/ir;"
        " do not edit by hand -->",
        "",
        *_intro(),
        "## Contents",
        "",
    ]
    for title, _, _ in SECTIONS:
        out.append(f"- [{title}](#{title.lower().replace(' ', '-')})")
    out.append("- [Worked examples](#worked-examples)")
    out.append("")
    for title, module, entries in SECTIONS:
        out += [f"## {title}", ""]
        out += _section_docs(module)
        for name, obj in entries:
            heading, doc = _entry(name, obj)
            out += [f"### `{heading}`", "", doc, ""]
    out += ["## Worked examples", "",
            "The CuIR of the library's expert kernels, verbatim. Variants subclass them and "
            "override hooks only, when they can.", ""]
    for title, mod in examples():
        src = inspect.getsource(importlib.import_module(mod))
        out += [f"### {title}", "", "```python", src.rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cubridge.ir.docgen",
                                     description="Generate docs/cuir.md from the docstrings.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cuir.md is stale")
    parser.add_argument("--output", type=Path, default=DOC_PATH)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python -m cubridge.ir.docgen", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
