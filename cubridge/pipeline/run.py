"""`cubridge run`: from a spec to a verified, benchmarked kernel, on the
deterministic path (the variant's change stays inside the hook points).

Stages, each writing its artifacts into the run directory and printing one
line (RunDir.stage): load -> transfer -> verify-ir -> lower -> compile ->
verify-gpu -> bench -> report. A stage whose inputs are unchanged is reused
from the manifest, so a repeated run is nearly instant. Without nvcc the run
stops after lowering, without a GPU after compiling, each time saying so.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from cubridge.attention import Shape
from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.pipeline.lowered import LoweredKernel
from cubridge.pipeline.variant import VariantKernel
from cubridge.rundir import RunDir, StageRecord, content_hash
from cubridge.spec.model import Spec

if TYPE_CHECKING:
    from cubridge.kernels import KernelMetadata
    from cubridge.lower.hook_header import HookHeader
    from cubridge.verify import VerifyReport

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Code whose change invalidates cached stages (the generators and the kernel).
_GENERATOR_DIRS = ("transfer", "lower", "ir", "kernels/fa_sm80", "kernels/common")

MODULE_TEMPLATE = '''"""The compiled kernel of spec {name!r}, made by `cubridge run` (do not edit).

    from kernel import attention
    out, lse = attention(q, k, v, **aux)   # lse is None for elementwise normalisers
"""

from pathlib import Path

from cubridge.pipeline.run import load_variant

_KERNEL = load_variant(Path(__file__).resolve().parent)


def attention(q, k, v, scale=None, **aux):
    return _KERNEL(q, k, v, scale=scale, **aux)
'''


class StopRun(Exception):
    """The run cannot go further on this machine (no nvcc, no GPU); what was
    produced so far stays in the run directory."""


class VerificationFailed(Exception):
    """A verifier rejected the IR or the kernel; its report is in the run directory."""


@dataclass
class RunOptions:
    kernel: str = "fa_sm80"
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


@dataclass
class RunResult:
    run_dir: Path
    stages: dict[str, StageRecord] = field(default_factory=dict)
    stopped: str = ""  # why the run ended early, if it did
    kernel: VariantKernel | LoweredKernel | None = None


def _generator_digest() -> str:
    parts: list[bytes] = []
    for d in _GENERATOR_DIRS:
        for p in sorted((PACKAGE_DIR / d).rglob("*")):
            if p.is_file() and p.suffix in (".py", ".cu", ".cuh", ".json"):
                parts += [str(p.relative_to(PACKAGE_DIR)).encode(), p.read_bytes()]
    return content_hash(*parts)


def default_run_dir(spec: Spec, spec_text: str) -> Path:
    return Path("runs") / f"{spec.name}-{content_hash(spec_text, _generator_digest())[:10]}"


def _head_dims(spec: Spec) -> list[int]:
    return sorted({cfg.d for cfg in spec.configs})


def _ir_shapes(spec: Spec) -> list[Shape]:
    """Small shapes for the executor (CPU): tails on both sides, Sq != Sk, the
    spec's GQA ratios with few heads, one shape spanning several tiles."""
    from cubridge.spec.shapes import shapes_for

    return shapes_for(spec.configs, ((1, 65, 129), (2, 200, 127), (1, 1, 70)))


def _gpu_shapes(spec: Spec) -> list[Shape]:
    """The verifier's default sweep plus real head configs at lengths that are
    not tile multiples."""
    from cubridge.spec.shapes import verification_shapes

    big = [Shape.from_config(cfg, b=2, sq=1000, sk=1000) for cfg in spec.configs]
    big += [Shape.from_config(spec.configs[0], b=1, sq=2100, sk=3000)]
    return [*verification_shapes(spec.configs), *big]


def load_variant(run_dir: Path) -> VariantKernel | LoweredKernel:
    """The kernel of a finished run directory (used by its kernel.py): the
    hook path's VariantKernel, or the LLM path's LoweredKernel."""
    from cubridge.lower.hook_header import generate_header
    from cubridge.spec import load
    from cubridge.transfer.hooks import plan_hooks

    run_dir = Path(run_dir)
    spec = load(run_dir / "spec.py")
    if (run_dir / "lower.json").is_file():
        return LoweredKernel(spec, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    kernel = manifest["stages"]["lower"]["data"]["kernel"]
    # The header that was compiled and verified is the one on disk; the aux
    # slots must still be the ones this version of cubridge would pack.
    header = generate_header(plan_hooks(spec))
    saved_manifest = json.loads((run_dir / "aux_manifest.json").read_text())
    if {k: v for k, v in header.manifest().items() if k != "spec"} != \
            {k: v for k, v in saved_manifest.items() if k != "spec"}:
        raise RuntimeError(f"{run_dir}: its aux slots differ from what this version of "
                           "cubridge packs for spec.py; rerun `cubridge run`")
    header = dataclasses.replace(header, text=(run_dir / "cubridge_hooks.cuh").read_text())
    return VariantKernel(spec, header, kernel)


def run(spec_path: str | Path, options: RunOptions | None = None) -> RunResult:
    """Run the whole pipeline for one spec file; see the module docstring."""
    from cubridge.spec import load

    opts = options or RunOptions()
    spec_path = Path(spec_path)
    spec_text = spec_path.read_text() if spec_path.is_file() else ""
    spec = load(spec_path)  # raises SpecError with file:line for a bad spec
    run_dir = RunDir(opts.out or default_run_dir(spec, spec_text), log=opts.log)
    result = RunResult(run_dir.path)
    base = content_hash(spec_text, _generator_digest(), opts.kernel)
    try:
        if not _took_llm_path(spec, spec_path, run_dir, opts, result):
            _stages(spec, spec_path, spec_text, run_dir, base, opts, result)
    except StopRun as stop:
        result.stopped = str(stop)
        run_dir.log(f"stopped: {stop}")
    result.stages = dict(run_dir.stages)
    _write_report(spec, run_dir, result)
    return result


# -- the LLM path (cubridge.llm_path, issue 6): taken when the change leaves the hooks ----------

def _took_llm_path(spec: Spec, spec_path: Path, run_dir: RunDir, opts: RunOptions,
                   result: RunResult) -> bool:
    """Say which path the run takes and why; on the LLM path run its stages
    (cubridge.llm_path.run) and return True."""
    from cubridge.llm import LLMError
    from cubridge.llm_path import StageFailed
    from cubridge.llm_path.run import run_llm_path
    from cubridge.pipeline.route import choose_path

    choice = choose_path(spec, opts.kernel)
    run_dir.log(f"[path] {choice}")
    if choice.path == "rules":
        return False
    try:
        stopped = run_llm_path(spec_path, run_dir, kernel=opts.kernel, arch=opts.arch)
    except StageFailed as exc:
        raise VerificationFailed(str(exc)) from exc
    except LLMError as exc:  # budget, provider: the run directory stays resumable
        raise StopRun(f"LLM stage stopped ({type(exc).__name__}: {exc}); rerun to resume "
                      "from the cached exchanges") from exc
    if stopped:
        raise StopRun(stopped)
    run_dir.write("kernel.py", MODULE_TEMPLATE.format(name=spec.name))
    result.kernel = LoweredKernel(spec, run_dir.path)
    if opts.bench:
        _bench(spec, run_dir, content_hash(spec_path.read_text(), "llm", opts.kernel), opts)
    return True


def _stages(spec: Spec, spec_path: Path, spec_text: str, run_dir: RunDir, base: str,
            opts: RunOptions, result: RunResult) -> None:
    from cubridge.kernels import load_metadata

    meta = load_metadata(opts.kernel)

    def load_stage(rec: StageRecord) -> None:
        run_dir.write("spec.py", spec_text)
        rec.artifacts.append("spec.py")
        rec.summary = (f"spec {spec.name!r}: {spec.normalizer}, "
                       f"{'score_mod ' if spec.score_mod else ''}"
                       f"{'mask_mod ' if spec.mask_mod else ''}"
                       f"configs {[c.name for c in spec.configs]}, dtypes "
                       f"{[str(d).removeprefix('torch.') for d in spec.dtypes]}")
        bad = [d for d in _head_dims(spec) if d not in meta.head_dims]
        if bad:
            raise ValueError(f"spec {spec.name}: head dims {bad} are not supported by kernel "
                             f"{opts.kernel} (it has {list(meta.head_dims)})")

    run_dir.run_stage("load", base, load_stage)
    target_cls = _transfer(spec, run_dir, base, opts)
    _verify_ir(spec, run_dir, base, opts, target_cls, meta)
    header = _lower(spec, run_dir, base, opts, meta)
    result.kernel = VariantKernel(spec, header, opts.kernel)
    _compile(spec, run_dir, base, opts, header, meta)
    _verify_gpu(spec, run_dir, base, opts, result.kernel)
    if opts.bench:
        _bench(spec, run_dir, base, opts)


def _transfer(spec: Spec, run_dir: RunDir, base: str, opts: RunOptions
              ) -> type:
    from cubridge.kernels.fa_sm80.cuir import FaSm80
    from cubridge.transfer.hooks import plan_hooks
    from cubridge.transfer.target import load_target, write_target

    def body(rec: StageRecord) -> None:
        plan = plan_hooks(spec)
        write_target(plan, FaSm80, run_dir.file("target_cuir.py"))
        rec.artifacts.append("target_cuir.py")
        hooks = [n for n, on in (("score_mod", plan.score), ("mask_mod", plan.mask)) if on]
        rec.summary = (f"rules: target CuIR overrides {', '.join(hooks) or 'no'} hooks, "
                       f"{plan.classification} block classification, {plan.normalizer} "
                       "-> target_cuir.py")

    run_dir.run_stage("transfer", base, body)
    return load_target(run_dir.file("target_cuir.py"))


def _verify_ir(spec: Spec, run_dir: RunDir, base: str, opts: RunOptions,
               target_cls: type, meta: KernelMetadata) -> None:
    from cubridge.ir import attention_fn
    from cubridge.verify import verify

    def body(rec: StageRecord) -> None:
        cfg = meta.config(_head_dims(spec)[0])
        fn = attention_fn(target_cls, block_m=cfg.block_m, block_n=cfg.block_n,
                          num_warps=cfg.num_warps, stages=cfg.stages)
        report = verify(spec, fn, device="cpu", dtypes=[spec.dtypes[0]],
                        shapes=_ir_shapes(spec), trials=opts.ir_trials, seed=opts.seed,
                        require_lse=spec.returns_lse)
        _record_verification(run_dir, rec, report, "verify_ir", "target CuIR",
                             "executor vs spec")

    run_dir.run_stage("verify-ir", content_hash(base, str(opts.ir_trials)), body)


def _lower(spec: Spec, run_dir: RunDir, base: str, opts: RunOptions,
           meta: KernelMetadata) -> HookHeader:
    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    header = generate_header(plan_hooks(spec))
    def body(rec: StageRecord) -> None:
        source = meta.source
        run_dir.write(source.name, source.read_text())
        run_dir.write("cubridge_hooks.cuh", header.text)
        run_dir.write("aux_manifest.json", json.dumps(header.manifest(), indent=1))
        rec.artifacts += [source.name, "cubridge_hooks.cuh", "aux_manifest.json"]
        rec.data["kernel"] = opts.kernel
        rec.summary = (f"hook codegen: {opts.kernel}'s {source.name} unchanged, "
                       f"cubridge_hooks.cuh generated ({len(header.text.splitlines())} lines, "
                       f"{len(header.slots)} aux slot(s))")

    run_dir.run_stage("lower", base, body)
    return header


def _target_arch(opts: RunOptions) -> str:
    if opts.arch:
        return opts.arch
    if torch.cuda.is_available():
        from cubridge.build.driver import device_arch

        return device_arch(torch.device("cuda"))
    return "sm_90a"


def _compile(spec: Spec, run_dir: RunDir, base: str, opts: RunOptions,
             header: HookHeader, meta: KernelMetadata) -> None:
    from cubridge.build.nvcc import nvcc_available
    from cubridge.kernels import fa_sm80

    if not nvcc_available():
        raise StopRun("nvcc not found: stopped after lowering (CUDA source in "
                      f"{run_dir.path}); install the CUDA toolkit or set CUDA_HOME")
    arch = _target_arch(opts)
    def body(rec: StageRecord) -> None:
        built = []
        for d in _head_dims(spec):
            for dtype in spec.dtypes:
                if dtype not in meta.dtypes:
                    continue
                ck = fa_sm80.compile_for(d, dtype, arch, hooks_header=header.text)
                name = f"kernel_d{d}_{str(dtype).removeprefix('torch.')}_{arch}.cubin"
                shutil.copyfile(ck.cubin_path, run_dir.file(name))
                res = ck.resources_of(meta.entry)
                built.append((name, res))
        run_dir.write("resources.json", json.dumps(
            {n: r.to_json() for n, r in built}, indent=1))
        run_dir.write("kernel.py", MODULE_TEMPLATE.format(name=spec.name))
        rec.artifacts += [n for n, _ in built] + ["resources.json", "kernel.py"]
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

    run_dir.run_stage("compile", content_hash(base, arch), body)


def _record_verification(run_dir: RunDir, rec: StageRecord, report: VerifyReport, name: str,
                         what: str, label: str) -> None:
    """Write a verifier report as NAME.txt / NAME.json; fail the stage unless it passed."""
    run_dir.write(f"{name}.txt", report.table() + "\n")
    run_dir.write(f"{name}.json", json.dumps(report.to_dict(), indent=1,
                                             default=str))
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


def _verify_gpu(spec: Spec, run_dir: RunDir, base: str, opts: RunOptions,
                kernel: VariantKernel) -> None:
    from cubridge.verify import verify

    if not torch.cuda.is_available():
        raise StopRun("no CUDA GPU visible: stopped after compiling (cubins in "
                      f"{run_dir.path}); run again on a GPU machine to verify and benchmark")

    def body(rec: StageRecord) -> None:
        report = verify(spec, kernel, device="cuda", shapes=_gpu_shapes(spec),
                        trials=opts.gpu_trials, seed=opts.seed,
                        require_lse=spec.returns_lse)
        _record_verification(run_dir, rec, report, "verify_gpu", "kernel (GPU)",
                             "kernel vs spec")

    run_dir.run_stage("verify-gpu", content_hash(_device_key(base), str(opts.gpu_trials)), body)


def _bench(spec: Spec, run_dir: RunDir, base: str, opts: RunOptions
           ) -> None:
    import shlex
    import sys

    from cubridge.bench.ours import external_impl
    from cubridge.bench.peers import PEERS, peer_impls
    from cubridge.bench.report import collect_metadata, markdown_table, write_reports
    from cubridge.bench.runner import OK, BenchConfig, run_bench
    from cubridge.bench.timing import TimingSettings, gpu_timer

    configs = list(opts.bench_configs or [c.name for c in spec.configs])
    peers = list(opts.bench_peers if opts.bench_peers is not None else PEERS)
    key = content_hash(_device_key(base), repr(list(opts.bench_seq_lens)), repr(configs),
                       repr(peers))
    def body(rec: StageRecord) -> None:
        settings = TimingSettings(25.0, 100.0)
        timer, timing = gpu_timer(settings)
        impls = [external_impl("ours", str(run_dir.path)), *peer_impls(peers)]
        meta = collect_metadata(shlex.join(sys.argv), "cuda", timing,
                                {"impls": {i.name: i.source for i in impls}})
        results = run_bench([spec], impls, BenchConfig(
            seq_lens=list(opts.bench_seq_lens), configs=configs, device="cuda"),
            timer, progress=run_dir.log)
        paths = write_reports(run_dir.file("bench"), meta, results)
        rec.artifacts += [str(Path(p).relative_to(run_dir.path)) for p in paths.values()]
        ours = [r for c in results for r in c.impls if r.impl == "ours"]
        ok = [r for r in ours if r.status == OK]
        best = max((r.tflops or 0.0 for r in ok), default=0.0)
        rec.data["table"] = markdown_table(results)
        rec.summary = (f"{len(ok)}/{len(ours)} cases verified and timed, best "
                       f"{best:.0f} TFLOP/s -> bench/")
        if len(ok) != len(ours):
            bad = [f"{r.status}: {r.reason}" for r in ours if r.status != OK]
            raise VerificationFailed(f"our kernel failed in the benchmark: {bad[:3]}")

    run_dir.run_stage("bench", key, body)


def _write_report(spec: Spec, run_dir: RunDir, result: RunResult) -> None:
    lines = [f"# cubridge run: {spec.name}", "", spec.description, ""]
    lines += ["| stage | result | seconds |", "|---|---|---|"]
    for rec in run_dir.stages.values():
        lines.append(f"| {rec.name} | {rec.summary} | {rec.seconds:.1f} |")
    if result.stopped:
        lines += ["", f"Stopped: {result.stopped}"]
    bench = run_dir.stages.get("bench")
    if bench is not None:
        lines += ["", "## Benchmark (TFLOP/s on allowed pairs)", "", bench.data.get("table", ""),
                  "", "Device, date, commit and command: bench/results.md."]
    run_dir.write("report.md", "\n".join(lines) + "\n")
