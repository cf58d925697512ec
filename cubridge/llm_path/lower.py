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
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from cubridge.build import CompileError
from cubridge.build.jobs import build_all, finished_builds
from cubridge.build.nvcc import nvcc_available
from cubridge.build.resources import SPILL_BUDGET_BYTES, KernelResources
from cubridge.kernels import KernelBuild, LibraryKernel
from cubridge.llm import LLMClient, apply_edits, parse_edits, run_generated
from cubridge.llm.loop import Rejected
from cubridge.llm_path.context import aux_table, launch_abi, method_sources, source_regions
from cubridge.llm_path.correspondence import mapped_ranges, render_correspondence
from cubridge.llm_path.gpu_check import GpuCheckResult, IsolatedGpuCheck
from cubridge.llm_path.messages import edit_actions_help, numbered, stage_messages
from cubridge.llm_path.programs import sandbox_limits
from cubridge.llm_path.sampling import best_of_k
from cubridge.llm_path.settings import StageFailed, StageSettings
from cubridge.rundir import SOURCE_FILE, RunDir, StageRecord, content_hash, lower_record
from cubridge.spec.loader import load

STAGE = "lower"
GPU_CHECK_DIR = "gpu_check"  # RUN/gpu_check/: each candidate's source and GPU-check job
# Spill bytes an edited kernel may add to the unmodified kernel's own: a few
# values reloaded once per key block cost little; more means the edit keeps
# too much live.
VARIANT_SPILL_MARGIN_BYTES = 32
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
                head_dim_v=b.head_dim_v).items()) + _padded_text(kernel, b)
        for i, b in enumerate(builds))


def _padded_text(kernel: LibraryKernel, build: KernelBuild) -> str:
    """What a build whose head dim the entry pads runs on (else "")."""
    built = kernel.metadata.built_dims(*build.dims)
    if built is None or built == build.dims:
        return ""
    return (f" (the problem's head dim {build.head_dim} runs on the {built[0]}-wide build: "
            f"its loads zero-fill the columns past {build.head_dim}, its stores skip them)")


def describe_target(target_ir: Path, kernel: LibraryKernel, settings: StageSettings
                    ) -> dict[str, Any]:
    """Outline, config and structural diff of the target against the library
    program, computed in the sandbox (the target is generated code)."""
    result = run_generated(Path(target_ir).read_text(), filename="target_cuir.py",
                           entry="cubridge.llm_path.ir_check:describe_program",
                           args=(kernel.ir_class,), limits=sandbox_limits(settings))
    return result.value


def source_resources(lib: LibraryKernel, builds: list[KernelBuild], dtype: torch.dtype,
                     arch: str) -> dict[str, Any]:
    """ptxas's report of the unmodified library kernel for each build (its
    default hooks): what the variant's register budget is relative to."""
    compiled = build_all([functools.partial(lib.compile_build, reference_build(lib, build),
                                            dtype, arch) for build in builds])
    return {build_name(build): ck.resources_of(lib.entry)
            for build, ck in zip(builds, compiled, strict=True)}


def reference_build(lib: LibraryKernel, build: KernelBuild) -> KernelBuild:
    """The unmodified kernel's build a variant's build is measured against: the
    same one, or for head dims the kernel does not build as they are (MLA's
    192/128 on an Ampere entry) its build at its largest head dim, with the same
    causality."""
    if lib.metadata.supports_dims(*build.dims):
        return build
    return replace(build, head_dim=max(lib.metadata.head_dims), head_dim_v=None)


def build_name(build: KernelBuild) -> str:
    return "D{}_Dv{}".format(*build.dims)


def spill_budgets(source: dict[str, Any]) -> dict[str, int]:
    """Spill bytes each build may have: the source kernel's own plus the margin."""
    return {name: res.spill_bytes + VARIANT_SPILL_MARGIN_BYTES for name, res in source.items()}


def _budget_text(lib: LibraryKernel, source: dict[str, Any]) -> str:
    parts = []
    for name, res in source.items():
        d, dv = (int(x) for x in name[1:].split("_Dv"))
        at = "" if lib.metadata.supports_dims(d, dv) else (
            f" (measured at its largest head dim, {max(lib.metadata.head_dims)})")
        parts.append(f"build {name}: the unmodified {lib.name}{at} uses {res.registers} registers "
                     f"per thread and spills {res.spill_text()}; the edited kernel may spill at "
                     f"most {res.spill_bytes + VARIANT_SPILL_MARGIN_BYTES} B")
    return ("\n" + "\n".join(f"- {p}" for p in parts) + "\n(the source's spills plus "
            f"{VARIANT_SPILL_MARGIN_BYTES} B: more means the edit keeps too much live, "
            "restructure it)")


def lower_messages(target_ir: Path, lib: LibraryKernel, spec_path: Path, arch: str,
                   description: dict[str, Any], builds: list[KernelBuild],
                   correspondence: dict[str, Any] | None,
                   source: dict[str, Any]):  # noqa: ANN201
    """The lowering prompt: the IR diff, the changed target methods, the
    correspondence and the CUDA regions the changed methods map to, the ABI
    the edit may use, the aux slots, the builds and their register budget.
    `correspondence`: the kernel's recorded one when None; `source`: the
    unmodified kernel's resources per build (source_resources)."""
    spec = load(spec_path)
    cuda = lib.source.read_text()
    target = Path(target_ir).read_text()
    correspondence = correspondence if correspondence is not None else lib.correspondence()
    changed = list(description.get("changed") or [])
    text_diff = "".join(difflib.unified_diff(
        lib.cuir_path.read_text().splitlines(keepends=True), target.splitlines(keepends=True),
        fromfile=f"{lib.name}/{lib.cuir_path.name}", tofile="target_cuir.py"))
    ranges = mapped_ranges(correspondence, changed)
    regions = (source_regions(cuda, ranges) if ranges else numbered(cuda))
    return stage_messages(
        "lower", system_template="lower_system", kernel_name=lib.name, arch=arch,
        spec_name=spec.name, spec_description=spec.description,
        defines=_defines_text(lib, builds, spec.dtypes[0]), budget=_budget_text(lib, source),
        ir_diff=description["diff"], ir_text_diff=text_diff.rstrip() or "(no text change)",
        changed_methods=method_sources(target, changed) or "# (no method changed)",
        correspondence=render_correspondence(correspondence, changed),
        aux=aux_table(spec, cuda=True), abi=launch_abi(lib),
        edit_actions=edit_actions_help().rstrip(),
        source_name=lib.source.name, source_lines=str(len(cuda.splitlines())),
        cuda_regions=regions)


@dataclass
class LoweringInputs:
    """What a lowering needs before its first request (lowering_inputs)."""

    description: dict[str, Any]
    builds: list[KernelBuild]
    source: dict[str, Any]  # the unmodified kernel's resources per build
    messages: list[Any]

    @property
    def budgets(self) -> dict[str, int]:
        return spill_budgets(self.source)


def lowering_inputs(target_ir: Path, lib: LibraryKernel, spec_path: Path, arch: str,
                    settings: StageSettings, *, correspondence: dict[str, Any] | None = None,
                    description: dict[str, Any] | None = None) -> LoweringInputs:
    """Describe the target (sandboxed), pick the builds, compile the
    unmodified kernel for its register budget and build the prompt."""
    spec = load(spec_path)
    if description is None:
        description = describe_target(Path(target_ir), lib, settings)
    builds = builds_for(spec, lib, description["config"])
    source = source_resources(lib, builds, spec.dtypes[0], arch)
    messages = lower_messages(Path(target_ir), lib, Path(spec_path), arch, description, builds,
                              correspondence, source)
    return LoweringInputs(description, builds, source, messages)


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
                   gpu_check: Callable[[list[Any], str], GpuCheckResult] | None,
                   budgets: dict[str, int] | None = None) -> Lowered:
    """Apply the reply's edits, compile every build and hold each to its spill
    budget (`budgets` by build name, from spill_budgets; SPILL_BUDGET_BYTES
    where none is given), then verify on the GPU where `gpu_check` is given."""
    edits = parse_edits(reply)  # [] for '@@@ keep': the source builds the target as it is
    edited = apply_edits(lib.source.read_text(), edits)
    lowered = Lowered(edited, len(edits))
    compiled = []
    builds_run = finished_builds([functools.partial(lib.compile_build, build, dtype, arch,
                                                    source=edited) for build in builds])
    for build, future in zip(builds, builds_run, strict=True):
        try:
            ck = future.result()
        except CompileError as exc:
            raise Rejected(compile_error_feedback(exc, edited, lib.source.name, build)) from None
        res = ck.resources_of(lib.entry)
        name = build_name(build)
        budget = (budgets or {}).get(name, SPILL_BUDGET_BYTES)
        if res.spill_bytes > budget:
            raise Rejected(f"build {name} compiles but spills "
                           f"{res.spill_text(f'{res.registers} registers')}; its budget "
                           f"is {budget} B "
                           "(the unmodified kernel's spills plus "
                           f"{VARIANT_SPILL_MARGIN_BYTES} B): restructure so that less "
                           "stays live")
        lowered.resources[name] = res.to_json()
        lowered.cubins.append(str(ck.cubin_path))
        compiled.append((build, ck))
    lowered.compiled = compiled
    if gpu_check is not None:
        checked = gpu_check(compiled, edited)  # raises Rejected on a failure, fault or hang
        lowered.verification, lowered.time_ms = checked.verification, checked.time_ms
    else:
        spills = sum(KernelResources.from_json(r).spill_bytes
                     for r in lowered.resources.values())
        lowered.verification = (f"compile-only: nvcc {arch}, {len(builds)} build(s), "
                                f"{spills} B of spills (within budget); "
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
    inputs = lowering_inputs(Path(target_ir), kernel, Path(spec_path), arch, settings,
                             correspondence=correspondence, description=description)
    description, builds, messages = inputs.description, inputs.builds, inputs.messages
    budgets = inputs.budgets
    gpu = IsolatedGpuCheck(kernel=kernel, spec_path=Path(spec_path), dtype=dtype, arch=arch,
                           seed=settings.seed, silence_s=settings.gpu_timeout_s,
                           workdir=run_dir.file(GPU_CHECK_DIR)) \
        if gpu_here() else None
    key = content_hash(client.provider.kind, client.provider.model,
                       json.dumps([m.to_json() for m in messages]), repr(settings), arch,
                       str(gpu is not None))

    def body(rec: StageRecord) -> None:
        selection = best_of_k(
            client, messages,
            lambda r: check_lowering(r, kernel, arch, builds, dtype, gpu, budgets),
            settings, describe=lambda v: {"edits": v.edits, "resources": v.resources,
                                          "verification": v.verification},
            timer=(lambda v: v.time_ms) if gpu is not None else None,
            untimed="kept the first candidate that compiled within the spill budget; "
                    "nothing was run or timed (no CUDA GPU here)")
        lowered: Lowered = selection.best.value
        run_dir.write(SOURCE_FILE, lowered.source)
        run_dir.write("lower.json", json.dumps(lower_record(
            kernel.name, "llm", [b.to_json() for b in builds],
            source_edited=lowered.edits > 0, spec=spec.name, arch=arch,
            ir_diff=description["diff"], resources=lowered.resources, spill_budgets=budgets,
            verification=lowered.verification, **selection.describe()), indent=1))
        rec.artifacts += [SOURCE_FILE, "lower.json"]
        edits = (f"{lowered.edits} edit(s)" if lowered.edits else
                 "no edit (@@@ keep: the source builds the target as configured)")
        rec.summary = (f"LLM lowering of {kernel.source.name}: {edits}, "
                       f"{lowered.verification}; {selection.timing}; {client.summary()}")

    rec = run_dir.run_stage(STAGE, key, body)
    return LowerResult(run_dir.file(SOURCE_FILE), rec, builds)
