"""The LLM lowering stage: target CuIR + the expert CUDA -> the variant's CUDA.

The prompt (templates stage_system + lower) carries the structural and text
diff of source and target IR, the recorded IR <-> CUDA correspondence (from a
lift) with the changed methods marked, the numbered CUDA source and the edit
action format. It is a ReAct loop: each reply's edit actions are applied to
the source, the result is compiled with nvcc (errors, with the edited lines
around them, go back), checked for register spills, and, where a GPU exists,
verified against the spec and timed in a watched child process
(cubridge.llm_path.gpu_check: a fault, trap or hang of the generated kernel ends
the child, not the tool, and goes back to the model as a precise error).
Without a GPU the stage verifies by compiling only and says so.
Artifacts: RUN/kernel.cu (the edited source) and RUN/lower.json (the builds,
in the format both paths share, cubridge.rundir.lower_record).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cubridge.build import CompileError
from cubridge.build.nvcc import nvcc_available
from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.kernels import KernelBuild, LibraryKernel
from cubridge.llm import LLMClient, ReplyParseError, apply_edits, parse_edits, run_generated
from cubridge.llm.loop import Rejected
from cubridge.llm_path.correspondence import render_correspondence
from cubridge.llm_path.gpu_check import GpuCheckResult, IsolatedGpuCheck
from cubridge.llm_path.messages import edit_actions_help, numbered, stage_messages
from cubridge.llm_path.programs import sandbox_limits
from cubridge.llm_path.sampling import best_of_k
from cubridge.llm_path.settings import StageFailed, StageSettings
from cubridge.rundir import SOURCE_FILE, RunDir, StageRecord, content_hash, lower_record
from cubridge.spec.loader import load

STAGE = "lower"
GPU_CHECK_DIR = "gpu_check"  # RUN/gpu_check/: each candidate's source and GPU-check job
CONTEXT_LINES = 3  # edited-source lines shown around each compiler error
MAX_DIAGNOSTICS = 10


@dataclass
class Lowered:
    source: str
    edits: int
    resources: dict[str, Any] = field(default_factory=dict)  # per build
    cubins: list[str] = field(default_factory=list)
    verification: str = ""  # what was checked: compile-only or the GPU verifier's summary
    compiled: list[Any] = field(default_factory=list, repr=False)  # (Build, CompiledKernel)
    time_ms: float | None = None  # the first build, timed in the GPU check's child


def builds_for(spec: Any, kernel: LibraryKernel, target_config: dict[str, Any]
               ) -> list[KernelBuild]:
    """One build per distinct (D, Dv) of the spec; tile sizes and causality from
    the target program's configuration (the fields the entry's config has)."""
    out: list[KernelBuild] = []
    for cfg in spec.configs:
        build = kernel.build_for(cfg.d, cfg.head_dim_v, target_config,
                                 causal=bool(target_config.get("causal", False)))
        if build not in out:
            out.append(build)
    return out


def _defines_text(kernel: LibraryKernel, builds: list[KernelBuild], dtype: Any) -> str:
    return "\n".join(
        f"- build {i + 1}: " + ", ".join(
            f"{k}={v}" for k, v in kernel.compile_defines(
                b.head_dim, dtype, kernel.build_config(b), causal=b.causal,
                head_dim_v=b.head_dim_v).items())
        for i, b in enumerate(builds))


def describe_target(target_ir: Path, kernel: LibraryKernel, settings: StageSettings
                    ) -> dict[str, Any]:
    """Outline, config and structural diff of the target against the library
    program, computed in the sandbox (the target is generated code)."""
    result = run_generated(Path(target_ir).read_text(), filename="target_cuir.py",
                           entry="cubridge.llm_path.ir_check:describe_program",
                           args=(kernel.ir_class,), limits=sandbox_limits(settings))
    return result.value


def lower_messages(target_ir: Path, lib: LibraryKernel, spec_path: Path, arch: str,
                   description: dict[str, Any], builds: list[KernelBuild],
                   correspondence: dict[str, Any] | None):  # noqa: ANN201
    spec = load(spec_path)
    source = lib.source.read_text()
    target = Path(target_ir).read_text()
    text_diff = "".join(difflib.unified_diff(
        lib.cuir_path.read_text().splitlines(keepends=True), target.splitlines(keepends=True),
        fromfile=f"{lib.name}/{lib.cuir_path.name}", tofile="target_cuir.py"))
    return stage_messages(
        "lower", kernel_name=lib.name, arch=arch,
        defines=_defines_text(lib, builds, spec.dtypes[0]),
        ir_diff=description["diff"], ir_text_diff=text_diff.rstrip() or "(no text change)",
        correspondence=render_correspondence(correspondence, description.get("changed")),
        edit_actions=edit_actions_help().rstrip(), spec_name=spec.name,
        spec_source=Path(spec_path).read_text().rstrip(), target_ir=target.rstrip(),
        source_name=lib.source.name, source_lines=str(len(source.splitlines())),
        cuda_source=numbered(source))


def _around(source: str, line: int) -> str:
    lines = source.splitlines()
    lo, hi = max(1, line - CONTEXT_LINES), min(len(lines), line + CONTEXT_LINES)
    return "\n".join(f"    {k:5d} | {lines[k - 1]}" for k in range(lo, hi + 1))


def compile_error_feedback(exc: Any, edited: str, source_name: str, build: KernelBuild) -> str:
    """nvcc's diagnostics with the edited lines around each one (line numbers
    of the edited file, not of the numbered original)."""
    d, dv = build.dims
    parts = [f"nvcc rejected the edited {source_name} (build D={d}, Dv={dv}); line numbers "
             "below are of the EDITED file, your edit actions must still refer to the "
             "original numbering:"]
    for file, line, severity, message in exc.diagnostics[:MAX_DIAGNOSTICS]:
        parts.append(f"{Path(file).name}:{line}: {severity}: {message}")
        # The edited text compiles as "kernel.cu (source text)"; headers keep their names.
        if line and (file.startswith("kernel.cu") or Path(file).name == source_name):
            parts.append(_around(edited, line))
    if not exc.diagnostics:
        parts.append(str(exc))
    return "\n".join(parts)


def check_lowering(reply: str, lib: LibraryKernel, arch: str, builds: list[KernelBuild],
                   dtype: torch.dtype,
                   gpu_check: Callable[[list[Any], str], GpuCheckResult] | None) -> Lowered:
    edits = parse_edits(reply)
    if not edits:
        raise ReplyParseError("no edit actions in the reply (blocks opened by '@@@ replace', "
                              "'@@@ insert after', '@@@ insert before' or '@@@ delete')")
    edited = apply_edits(lib.source.read_text(), edits)
    lowered = Lowered(edited, len(edits))
    compiled = []
    for build in builds:
        try:
            ck = lib.compile_build(build, dtype, arch, source=edited)
        except CompileError as exc:
            raise Rejected(compile_error_feedback(exc, edited, lib.source.name, build)) from None
        res = ck.resources_of(lib.entry)
        name = "D{}_Dv{}".format(*build.dims)
        if not res.within_spill_budget:
            raise Rejected(f"build {name} compiles but spills registers ({res.spill_store_bytes} "
                           f"B stored, {res.spill_load_bytes} B loaded, {res.registers} "
                           f"registers; the budget is {SPILL_BUDGET_BYTES} B): restructure so "
                           "that less stays live")
        lowered.resources[name] = res.to_json()
        lowered.cubins.append(str(ck.cubin_path))
        compiled.append((build, ck))
    lowered.compiled = compiled
    if gpu_check is not None:
        checked = gpu_check(compiled, edited)  # raises Rejected on a failure, fault or hang
        lowered.verification, lowered.time_ms = checked.verification, checked.time_ms
    else:
        spills = sum(r["spill_store_bytes"] + r["spill_load_bytes"]
                     for r in lowered.resources.values())
        lowered.verification = (f"compile-only: nvcc {arch}, {len(builds)} build(s), "
                                f"{spills} B of spills; "
                                "no CUDA GPU here, so the kernel was not run or verified")
    return lowered


def gpu_here() -> bool:
    """Whether candidates are verified on a GPU here (else by compiling only)."""
    return torch.cuda.is_available()


@dataclass
class LowerResult:
    source: Path  # RUN/kernel.cu
    record: StageRecord
    builds: list[KernelBuild]


def lower(target_ir: Path, client: LLMClient, run_dir: RunDir, spec_path: Path,
          settings: StageSettings | None = None, *, kernel: LibraryKernel,
          arch: str = "sm_90a", correspondence: dict[str, Any] | None = None,
          description: dict[str, Any] | None = None) -> LowerResult:
    """Run the stage (or reuse it). `description`: describe_target's result when
    the caller has it already (it costs a sandbox run)."""
    settings = settings or StageSettings()
    if not nvcc_available():
        raise StageFailed("nvcc not found: the lowering stage checks every reply by compiling "
                          "it; install the CUDA toolkit or set CUDA_HOME")
    spec = load(spec_path)
    dtype = spec.dtypes[0]
    if description is None:
        description = describe_target(Path(target_ir), kernel, settings)
    builds = builds_for(spec, kernel, description["config"])
    messages = lower_messages(Path(target_ir), kernel, Path(spec_path), arch, description,
                              builds, correspondence)
    gpu = IsolatedGpuCheck(kernel=kernel, spec_path=Path(spec_path), dtype=dtype, arch=arch,
                           seed=settings.seed, silence_s=settings.gpu_timeout_s,
                           workdir=run_dir.file(GPU_CHECK_DIR)) \
        if gpu_here() else None
    key = content_hash(client.provider.kind, client.provider.model,
                       json.dumps([m.to_json() for m in messages]), repr(settings), arch,
                       str(gpu is not None))

    def body(rec: StageRecord) -> None:
        selection = best_of_k(
            client, messages, lambda r: check_lowering(r, kernel, arch, builds, dtype, gpu),
            settings, describe=lambda v: {"edits": v.edits, "resources": v.resources,
                                          "verification": v.verification},
            timer=(lambda v: v.time_ms) if gpu is not None else None,
            untimed="kept the first candidate that compiled within the spill budget; "
                    "nothing was run or timed (no CUDA GPU here)")
        lowered: Lowered = selection.best.value
        run_dir.write(SOURCE_FILE, lowered.source)
        run_dir.write("lower.json", json.dumps(lower_record(
            kernel.name, "llm", [b.to_json() for b in builds], source_edited=True, arch=arch,
            ir_diff=description["diff"], resources=lowered.resources,
            verification=lowered.verification, **selection.describe()), indent=1))
        rec.artifacts += [SOURCE_FILE, "lower.json"]
        rec.summary = (f"LLM lowering of {kernel.source.name}: {lowered.edits} edit(s), "
                       f"{lowered.verification}; {selection.timing}; {client.summary()}")

    rec = run_dir.run_stage(STAGE, key, body)
    return LowerResult(run_dir.file(SOURCE_FILE), rec, builds)
