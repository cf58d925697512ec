"""`cubridge run`: from a spec to a verified, benchmarked kernel.

The run checks the spec first (`cubridge spec check`: its mods against its
reference, up to lengths past twice its largest integer constant; a bad spec
is blamed with its file:line before any stage), picks a library entry
(`choose_for_spec`, or `--kernel`; the reason is printed as `[select]` and
kept in plan.json and report.md), decides the path once (`pipeline.route`:
the deterministic hook rules when the variant's change stays inside the
entry's hook points, the LLM stages otherwise) and runs the stages, each
writing its artifacts into the run directory and printing one line
(RunDir.stage):

    check -> load -> select -> route -> transfer -> [verify-ir] -> lower -> compile
          -> verify-gpu -> bench

Both paths write the same artifacts (cubridge.rundir names them) and end in
one `CompiledVariant`. A stage whose inputs are unchanged is reused from the
manifest, so a repeated run is nearly instant. Without nvcc the run stops
after the target CuIR (LLM path) or lowering (rules), without a GPU after
compiling, each time saying so.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cubridge.attention import Shape
from cubridge.bench.ours import external_impl
from cubridge.bench.peers import PEERS, peer_impls
from cubridge.bench.report import collect_metadata, markdown_table, write_reports
from cubridge.bench.runner import OK, BenchConfig, run_bench
from cubridge.bench.timing import TimingSettings, gpu_timer
from cubridge.build.compile import DEFAULT_HOOKS_DIR
from cubridge.build.driver import device_arch
from cubridge.build.errors import NoGpuError, NvccNotFoundError
from cubridge.build.nvcc import nvcc_available
from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.ir import attention_fn
from cubridge.kernels import LibraryKernel, Selection, choose_for_spec
from cubridge.llm import LLMClient, LLMConfig, LLMError, load_config
from cubridge.llm_path import StageFailed, StageSettings
from cubridge.llm_path import lower as llm_lower
from cubridge.llm_path import transfer as llm_transfer
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import Route, check_dtypes, choose_path
from cubridge.pipeline.variant import CompiledVariant, rules_variant
from cubridge.rundir import (
    AUX_MANIFEST_FILE,
    HOOKS_FILE,
    KERNEL_MODULE,
    LOWER_FILE,
    PLAN_FILE,
    SOURCE_FILE,
    SPEC_CHECK_FILE,
    SPEC_FILE,
    TARGET_FILE,
    RunDir,
    StageRecord,
    content_hash,
)
from cubridge.spec.check import check_digest, check_spec
from cubridge.spec.lengths import long_check_shapes
from cubridge.spec.loader import load, read_spec_source
from cubridge.spec.model import Spec
from cubridge.spec.shapes import fit_shapes, shapes_for, verification_shapes
from cubridge.transfer.hooks import HookPlan
from cubridge.transfer.target import load_target, write_target
from cubridge.verify import VerifyReport, verify

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Code whose change invalidates cached stages (the generators; the kernel's own
# directory is added per run).
_GENERATOR_DIRS = ("transfer", "lower", "ir", "kernels/common")
DEFAULT_ARCH = "sm_90a"  # compile target without a GPU

MODULE_TEMPLATE = '''"""The compiled kernel of spec {name!r}, made by `cubridge run` (do not edit).

    from kernel import attention
    out, lse = attention(q, k, v, **aux)   # lse is None for elementwise normalisers
"""

from pathlib import Path

from cubridge.pipeline.variant import load_variant

_KERNEL = load_variant(Path(__file__).resolve().parent)


def attention(q, k, v, scale=None, **aux):
    return _KERNEL(q, k, v, scale=scale, **aux)
'''


class StopRun(Exception):
    """The run cannot go further on this machine (no nvcc, no GPU, an LLM
    budget); what was produced so far stays in the run directory. `error`: the
    exception class cubridge.compile raises for it (NoGpuError, NvccNotFoundError)."""

    def __init__(self, message: str, error: type[Exception] = RuntimeError):
        super().__init__(message)
        self.error = error


class VerificationFailed(Exception):
    """A verifier rejected the IR or the kernel; its report is in the run directory."""


@dataclass
class RunOptions:
    kernel: str | LibraryKernel | None = None  # default: select_kernel for the spec
    out: Path | None = None  # default: runs/<spec>-<hash>
    arch: str | None = None  # default: the GPU's, else sm_90a
    ir_trials: int = 1
    gpu_trials: int = 2
    bench: bool = True
    bench_seq_lens: Sequence[int] = (1024, 2048, 4096, 8192)
    bench_configs: Sequence[str] | None = None  # default: the spec's configs
    bench_peers: Sequence[str] | None = None  # default: every peer
    seed: int | None = None
    log: Callable[[str], None] | None = None
    llm_config: LLMConfig | None = None  # LLM path; default: environment and config file
    llm_settings: StageSettings | None = None


@dataclass
class RunResult:
    run_dir: Path
    stages: dict[str, StageRecord] = field(default_factory=dict)
    stopped: str = ""  # why the run ended early, if it did
    stop_error: type[Exception] = RuntimeError  # what cubridge.compile raises for it
    kernel: CompiledVariant | None = None
    route: Route | None = None


@dataclass
class _Run:
    """What every stage of one run reads."""

    spec: Spec
    spec_path: Path
    spec_text: str
    kernel: LibraryKernel
    arch: str
    run_dir: RunDir
    base: str  # content hash of the spec, the generators and the kernel
    opts: RunOptions
    selection: Selection  # the kernel, and why (plan.json, report.md, [select])


def _generator_digest(kernel: LibraryKernel) -> str:
    parts: list[bytes] = []
    for root in [*(PACKAGE_DIR / d for d in _GENERATOR_DIRS), kernel.directory]:
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".json"):
                parts += [p.name.encode(), p.read_bytes()]
    return content_hash(*parts)


def target_arch(arch: str | None) -> tuple[str, str]:
    """The arch to compile for (the given one, the GPU's, else sm_90a) and
    where it came from, for the selection's reason."""
    if arch:
        return arch, "--arch"
    if torch.cuda.is_available():
        device = torch.device("cuda")
        return device_arch(device), f"this GPU: {torch.cuda.get_device_name(device)}"
    return DEFAULT_ARCH, "no GPU here: the default compile target"


def _head_dims(spec: Spec) -> list[tuple[int, int]]:
    """The spec's (QK, V) head dims, sorted."""
    return sorted({(cfg.d, cfg.head_dim_v) for cfg in spec.configs})


def _ir_shapes(spec: Spec) -> list[Shape]:
    """Shapes for the executor (CPU): tails on both sides, Sq != Sk, the spec's
    GQA ratios with few heads, and the spec check's long case (past twice the
    spec's largest integer constant; cubridge.spec.lengths)."""
    small = shapes_for(spec.configs, ((1, 65, 129), (2, 200, 127), (1, 1, 70)))
    return fit_shapes(spec, [*small, *long_check_shapes(spec.configs, spec)])


def _gpu_shapes(spec: Spec) -> list[Shape]:
    """The verifier's default sweep plus real head configs at lengths that are
    not tile multiples."""
    big = [Shape.from_config(cfg, b=2, sq=1000, sk=1000) for cfg in spec.configs]
    big += [Shape.from_config(spec.configs[0], b=1, sq=2100, sk=3000)]
    return fit_shapes(spec, [*verification_shapes(spec.configs), *big])


def _start(spec_path: str | Path, opts: RunOptions, *, check: bool = False
           ) -> tuple[_Run, Route]:
    """Load the spec, open the run directory, run the spec check (`check`),
    pick the kernel and the path."""
    spec_path = Path(spec_path)
    spec = load(spec_path)  # raises SpecError with file:line for a bad spec
    spec_text = read_spec_source(spec_path)
    arch, arch_source = target_arch(opts.arch)
    selection = choose_for_spec(spec, arch, opts.kernel, arch_source)
    kernel = selection.kernel
    digest = _generator_digest(kernel)
    out = opts.out or Path("runs") / f"{spec.name}-{content_hash(spec_text, digest)[:10]}"
    run_dir = RunDir(out, log=opts.log)
    ctx = _Run(spec, spec_path, spec_text, kernel, arch, run_dir,
               content_hash(spec_text, digest, kernel.name), opts, selection)
    if check:
        _spec_check(ctx)  # a bad spec is blamed (file:line) before any stage
    check_dtypes(spec, kernel)  # (a dtype no kernel builds: blamed at DTYPES)
    route = choose_path(spec, kernel)  # the run's one tracing of the spec's mods
    _load_and_route(ctx, route)
    return ctx, route


def run(spec_path: str | Path, options: RunOptions | None = None) -> RunResult:
    """Run the whole pipeline for one spec file; see the module docstring."""
    opts = options or RunOptions()
    ctx, route = _start(spec_path, opts, check=True)
    result = RunResult(ctx.run_dir.path, route=route)
    try:
        variant = _rules_path(ctx, route) if route.path == "rules" else _llm_path(ctx)
        result.kernel = variant
        _compile(ctx, variant)
        _verify_gpu(ctx, variant)
        if opts.bench:
            _bench(ctx, variant)
    except StopRun as stop:
        result.stopped, result.stop_error = str(stop), stop.error
        ctx.run_dir.log(f"stopped: {stop}")
    except Exception as exc:  # a failed stage: its report says which and why, then it raises
        result.stages = dict(ctx.run_dir.stages)
        _write_report(ctx, result, failed=f"{type(exc).__name__}: {exc}")
        raise
    result.stages = dict(ctx.run_dir.stages)
    _write_report(ctx, result)
    return result


def transfer_only(spec_path: str | Path, options: RunOptions | None = None) -> Path:
    """`cubridge transfer`: the target CuIR of a spec, verified, by the rules when
    the change stays in the hooks, else by the LLM; returns its path."""
    opts = options or RunOptions()
    ctx, route = _start(spec_path, opts)
    if route.path == "rules":
        target = _rules_transfer(ctx, route)
        _verify_ir(ctx, target, route.plan)
    else:  # LLM errors (budget, no candidate passed) reach the caller as they are
        llm_transfer.transfer(ctx.spec_path, _llm_client(ctx, "transfer"), ctx.run_dir,
                              opts.llm_settings or StageSettings(), kernel=ctx.kernel)
    return ctx.run_dir.file(TARGET_FILE)


# -- the stages both paths share ----------------------------------------------------------------

def _spec_check(ctx: _Run) -> None:
    """`cubridge spec check` as the first stage: mods that disagree with the
    reference (up to the long case), or raise, fail here with the spec's
    file:line (SpecError), not later in the target CuIR."""
    run_dir = ctx.run_dir

    def body(rec: StageRecord) -> None:
        summary = check_spec(ctx.spec)
        run_dir.write(SPEC_CHECK_FILE, "\n".join(summary.lines()) + "\n")
        rec.artifacts.append(SPEC_CHECK_FILE)
        rec.summary = f"spec check: {summary.brief()}"

    run_dir.run_stage("check", content_hash(ctx.spec_text, check_digest()), body)


def _load_and_route(ctx: _Run, route: Route) -> None:
    spec, run_dir = ctx.spec, ctx.run_dir

    def load_stage(rec: StageRecord) -> None:
        run_dir.write(SPEC_FILE, ctx.spec_text)
        rec.artifacts.append(SPEC_FILE)
        rec.summary = (f"spec {spec.name!r}: {spec.normalizer}, "
                       f"{'score_mod ' if spec.score_mod else ''}"
                       f"{'mask_mod ' if spec.mask_mod else ''}"
                       f"configs {[c.name for c in spec.configs]}, dtypes "
                       f"{[str(d).removeprefix('torch.') for d in spec.dtypes]}")

    def select_stage(rec: StageRecord) -> None:
        rec.data["selection"] = ctx.selection.to_json()
        rec.summary = str(ctx.selection)

    def route_stage(rec: StageRecord) -> None:
        plan = {**route.to_json(), "selection": ctx.selection.to_json()}
        run_dir.write(PLAN_FILE, json.dumps(plan, indent=1))
        rec.artifacts.append(PLAN_FILE)
        rec.data["path"] = route.path
        rec.summary = f"{route} -> {PLAN_FILE}"

    # The selection's reason names the device: a run on another GPU restates it.
    selected = content_hash(ctx.base, str(ctx.selection))
    run_dir.run_stage("load", ctx.base, load_stage)
    run_dir.run_stage("select", selected, select_stage)
    run_dir.run_stage("route", selected, route_stage)


def _compile(ctx: _Run, variant: CompiledVariant) -> None:
    run_dir, arch = ctx.run_dir, ctx.arch
    if not nvcc_available():
        raise StopRun("nvcc not found: stopped after lowering (CUDA source in "
                      f"{run_dir.path}); install the CUDA toolkit or set CUDA_HOME",
                      NvccNotFoundError)

    def body(rec: StageRecord) -> None:
        built = []
        for build, dtype, compiled in variant.compile(arch):
            d, dv = build.dims
            dims = f"d{d}" if dv == d else f"d{d}_dv{dv}"
            name = f"kernel_{dims}_{str(dtype).removeprefix('torch.')}_{arch}.cubin"
            shutil.copyfile(compiled.cubin_path, run_dir.file(name))
            built.append((name, compiled.resources_of(ctx.kernel.entry)))
        run_dir.write("resources.json", json.dumps(
            {n: r.to_json() for n, r in built}, indent=1))
        run_dir.write(KERNEL_MODULE, MODULE_TEMPLATE.format(name=ctx.spec.name))
        rec.artifacts += [n for n, _ in built] + ["resources.json", KERNEL_MODULE]
        # Spills in a generated variant cost speed, not correctness: report them,
        # against the budget a variant may have (build.resources.SPILL_BUDGET_BYTES).
        regs = ", ".join(f"{n.split('_' + arch)[0]}: {r.registers} regs"
                         + (f", {r.spill_bytes} B of spill traffic "
                            f"({'within' if r.within_spill_budget else 'OVER'} the "
                            f"{SPILL_BUDGET_BYTES} B budget)" if r.spills else "")
                         for n, r in built)
        spilled = any(r.spills for _, r in built)
        rec.summary = (f"nvcc {arch}: {len(built)} cubin(s), "
                       f"{'register spills' if spilled else 'no spills'} ({regs})")

    run_dir.run_stage("compile", content_hash(ctx.base, arch, variant.fingerprint()), body)


def _record_verification(run_dir: RunDir, rec: StageRecord, report: VerifyReport, name: str,
                         what: str, label: str) -> None:
    """Write a verifier report as NAME.txt / NAME.json; fail the stage unless it passed."""
    run_dir.write(f"{name}.txt", report.table() + "\n")
    run_dir.write(f"{name}.json", json.dumps(report.to_dict(), indent=1, default=str))
    if not report.passed:
        raise VerificationFailed(f"{what} fails the spec: {_failures(report)} "
                                 f"(see {run_dir.file(name + '.txt')})")
    rec.artifacts += [f"{name}.txt", f"{name}.json"]
    rec.summary = f"{label}: {report.summary()}"


def _failures(report: VerifyReport) -> str:
    """The report's summary and its first failing cases, for the error message."""
    lines = [report.summary()]
    for c in report.failures[:3]:
        lines.append(f"  {c.verdict}: {c.shape} {c.dtype} {c.distribution} seed {c.seed}: "
                     f"{c.reason}")
    return "\n".join(lines)


def _device_key(base: str) -> str:
    return content_hash(base, torch.cuda.get_device_name() if torch.cuda.is_available() else "")


def _verify_gpu(ctx: _Run, variant: CompiledVariant) -> None:
    run_dir, opts, spec = ctx.run_dir, ctx.opts, ctx.spec
    if not torch.cuda.is_available():
        raise StopRun("no CUDA GPU visible: stopped after compiling (cubins in "
                      f"{run_dir.path}); run again on a GPU machine to verify and benchmark",
                      NoGpuError)

    # A kernel the LLM edited is generated code: it runs in a worker process (its
    # kernel.py), where a fault or a hang ends the worker, not the run.
    generated = variant.path == "llm"
    impl = f"{run_dir.file(KERNEL_MODULE)}:attention" if generated else variant
    timeout = (opts.llm_settings or StageSettings()).gpu_timeout_s

    def body(rec: StageRecord) -> None:
        report = verify(spec, impl, device="cuda", shapes=_gpu_shapes(spec),
                        trials=opts.gpu_trials, seed=opts.seed, require_lse=spec.returns_lse,
                        isolate=generated, timeout_s=timeout)
        _record_verification(run_dir, rec, report, "verify_gpu", "kernel (GPU)",
                             "kernel vs spec" + (" (isolated worker)" if generated else ""))

    run_dir.run_stage("verify-gpu", content_hash(_device_key(ctx.base), str(opts.gpu_trials),
                                                 variant.fingerprint()), body)


def bench_dtype(spec: Spec) -> torch.dtype:
    """The dtype a run benchmarks in: bf16, the benchmark's, where the spec lists it;
    else the spec's first (its kernel has builds for its DTYPES only)."""
    return torch.bfloat16 if torch.bfloat16 in spec.dtypes else spec.dtypes[0]


def _bench(ctx: _Run, variant: CompiledVariant) -> None:
    run_dir, opts, spec = ctx.run_dir, ctx.opts, ctx.spec
    configs = list(opts.bench_configs or [c.name for c in spec.configs])
    peers = list(opts.bench_peers if opts.bench_peers is not None else PEERS)
    key = content_hash(_device_key(ctx.base), variant.fingerprint(),
                       repr(list(opts.bench_seq_lens)), repr(configs), repr(peers))

    def body(rec: StageRecord) -> None:
        timer, timing = gpu_timer(TimingSettings(25.0, 100.0))
        impls = [external_impl("ours", str(run_dir.path)), *peer_impls(peers)]
        meta = collect_metadata(shlex.join(sys.argv), "cuda", timing,
                                {"impls": {i.name: i.source for i in impls}})
        results = run_bench([spec], impls, BenchConfig(
            seq_lens=list(opts.bench_seq_lens), configs=configs, device="cuda",
            dtype=bench_dtype(spec)),
            timer, progress=run_dir.log)
        paths = write_reports(run_dir.file("bench"), meta, results)
        rec.artifacts += [str(Path(p).relative_to(run_dir.path)) for p in paths.values()]
        ours = [r for c in results for r in c.impls if r.impl == "ours"]
        ok = [r for r in ours if r.status == OK]
        best = max((r.tflops or 0.0 for r in ok), default=0.0)
        rec.data["table"] = markdown_table(results)
        rec.data["counting"] = sorted({c.counting for c in results})
        rec.summary = (f"{len(ok)}/{len(ours)} cases verified and timed, best "
                       f"{best:.0f} TFLOP/s -> bench/")
        if len(ok) != len(ours):
            bad = [f"{r.status}: {r.reason}" for r in ours if r.status != OK]
            raise VerificationFailed(f"our kernel failed in the benchmark: {bad[:3]}")

    run_dir.run_stage("bench", key, body)


def _write_report(ctx: _Run, result: RunResult, failed: str = "") -> None:
    spec, run_dir = ctx.spec, ctx.run_dir
    lines = [f"# cubridge run: {spec.name}", "", spec.description, "",
             f"Kernel: {ctx.selection}", ""]
    lines += ["| stage | result | seconds |", "|---|---|---|"]
    for rec in run_dir.stages.values():
        lines.append(f"| {rec.name} | {rec.summary} | {rec.seconds:.1f} |")
    if result.stopped:
        lines += ["", f"Stopped: {result.stopped}"]
    if failed:
        lines += ["", f"Failed: {failed}", "",
                  "The artifacts of the stages above are kept; fix the cause and run again "
                  "(finished stages are reused)."]
    bench = run_dir.stages.get("bench")
    if bench is not None:
        lines += ["", "## Benchmark (TFLOP/s on allowed pairs)", "", bench.data.get("table", ""),
                  "", *[f"Counting: {how}" for how in bench.data.get("counting", [])],
                  "", "Device, date, commit and command: bench/results.md."]
    run_dir.write("report.md", "\n".join(lines) + "\n")


# -- the rules path: the change stays inside the hooks ------------------------------------------

def _rules_path(ctx: _Run, route: Route) -> CompiledVariant:
    target = _rules_transfer(ctx, route)
    _verify_ir(ctx, target, route.plan)
    return _rules_lower(ctx, route)


def _rules_transfer(ctx: _Run, route: Route) -> type:
    assert route.plan is not None
    plan, kernel, run_dir = route.plan, ctx.kernel, ctx.run_dir

    def body(rec: StageRecord) -> None:
        base = kernel.cuir_class()
        write_target(plan, base, run_dir.file(TARGET_FILE))
        run_dir.write("transfer.json", json.dumps(
            {"path": "rules", "kernel": "Target", "source_kernel": kernel.name,
             "base": f"{base.__module__}:{base.__name__}",
             "config": kernel.cuir_config(*_head_dims(ctx.spec)[0])}, indent=1))
        rec.artifacts += [TARGET_FILE, "transfer.json"]
        hooks = [n for n, on in (("score_mod", plan.score), ("mask_mod", plan.mask)) if on]
        rec.summary = (f"rules: target CuIR overrides {', '.join(hooks) or 'no'} hooks, "
                       f"{plan.classification} block classification, {plan.normalizer} "
                       f"-> {TARGET_FILE}")

    run_dir.run_stage("transfer", ctx.base, body)
    return load_target(run_dir.file(TARGET_FILE))


def _verify_ir(ctx: _Run, target: type, plan: HookPlan | None) -> None:
    spec, opts = ctx.spec, ctx.opts

    def body(rec: StageRecord) -> None:
        fn = attention_fn(target, **ctx.kernel.cuir_config(*_head_dims(spec)[0]))
        if plan is not None:  # tensors the mods capture, where the call leaves them out
            fn = plan.supplying_captured(fn)
        report = verify(spec, fn, device="cpu", dtypes=spec.dtypes,
                        shapes=_ir_shapes(spec), trials=opts.ir_trials, seed=opts.seed,
                        require_lse=spec.returns_lse)
        _record_verification(ctx.run_dir, rec, report, "verify_ir", "target CuIR",
                             "executor vs spec")

    ctx.run_dir.run_stage("verify-ir", content_hash(ctx.base, str(opts.ir_trials)), body)


def _rules_lower(ctx: _Run, route: Route) -> CompiledVariant:
    assert route.plan is not None
    kernel, run_dir = ctx.kernel, ctx.run_dir
    header = generate_header(route.plan)
    variant = rules_variant(ctx.spec, kernel, header)

    def body(rec: StageRecord) -> None:
        run_dir.write(SOURCE_FILE, kernel.source.read_text())
        run_dir.write(HOOKS_FILE, header.text)
        run_dir.write(AUX_MANIFEST_FILE, json.dumps(variant.aux_manifest(), indent=1))
        run_dir.write(LOWER_FILE, json.dumps(variant.lower_record(), indent=1))
        rec.artifacts += [SOURCE_FILE, HOOKS_FILE, AUX_MANIFEST_FILE, LOWER_FILE]
        rec.data["kernel"] = kernel.name
        rec.data["mask_bits"] = header.mask_form(kernel.source.read_text())
        rec.summary = (f"hook codegen: {kernel.name}'s {kernel.source.name} unchanged "
                       f"({SOURCE_FILE}), {HOOKS_FILE} generated "
                       f"({len(header.text.splitlines())} lines, {len(header.slots)} aux "
                       f"slot(s); mask bits by {rec.data['mask_bits']})")

    run_dir.run_stage("lower", ctx.base, body)
    return variant


# -- the LLM path: the change leaves the hooks --------------------------------------------------

def _llm_client(ctx: _Run, stage: str) -> LLMClient:
    return LLMClient.from_config(ctx.opts.llm_config or load_config(), ctx.run_dir.path, stage)


def _llm_stage(ctx: _Run, stage: Callable[[], object]) -> object:
    try:
        return stage()
    except StageFailed as exc:
        raise VerificationFailed(str(exc)) from exc
    except LLMError as exc:  # budget, provider: the run directory stays resumable
        raise StopRun(f"LLM stage stopped ({type(exc).__name__}: {exc}); rerun to resume "
                      "from the cached exchanges") from exc


def _llm_transfer(ctx: _Run) -> Path:
    settings = ctx.opts.llm_settings or StageSettings()
    result = _llm_stage(ctx, lambda: llm_transfer.transfer(
        ctx.spec_path, _llm_client(ctx, "transfer"), ctx.run_dir, settings, kernel=ctx.kernel))
    return result.target  # type: ignore[attr-defined]


def _llm_path(ctx: _Run) -> CompiledVariant:
    target = _llm_transfer(ctx)
    if not nvcc_available():
        raise StopRun(f"nvcc not found: stopped after the verified target CuIR ({target}); the "
                      "LLM lowering checks each reply by compiling it", NvccNotFoundError)
    settings = ctx.opts.llm_settings or StageSettings()
    lowered = _llm_stage(ctx, lambda: llm_lower.lower(
        target, _llm_client(ctx, "lower"), ctx.run_dir, ctx.spec_path, settings,
        kernel=ctx.kernel, arch=ctx.arch))
    variant = CompiledVariant(ctx.spec, ctx.kernel, lowered.builds,  # type: ignore[attr-defined]
                              source=ctx.run_dir.file(SOURCE_FILE).read_text())
    # The lowered source is built with the entry's default hooks; the aux tensors
    # go to the slots in make_aux's order: the same artifacts as the rules path.
    ctx.run_dir.write(HOOKS_FILE, (DEFAULT_HOOKS_DIR / HOOKS_FILE).read_text())
    ctx.run_dir.write(AUX_MANIFEST_FILE, json.dumps(variant.aux_manifest(), indent=1))
    return variant
