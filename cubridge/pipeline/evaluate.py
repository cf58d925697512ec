"""`cubridge eval`: a folder of specs through the LLM path, k independent
samples each, scored the way the paper scores models.

Per spec (specs the rules path serves are listed and skipped: no model is
needed for them) and sample s: the transfer loop (request sample index s, up
to `rounds` replies), then, if the target CuIR verified, the lowering loop on
the same sample index. Each sample records whether the target CuIR passed the
executor (IR), whether an edit compiled within the register budget
(compile), whether the kernel passed the GPU verifier (GPU: "not run" without
a CUDA GPU, never counted as passed), the replies each stage took, tokens,
cost and seconds per stage, and on a GPU the verified kernel's time against
the source kernel's own causal build.

pass@k is the unbiased estimator over the n samples of a spec,
1 - C(n - c, k) / C(n, k) with c passing samples (k <= n, else not reported).
Writes eval.json, eval.md and eval.png into the output folder.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from cubridge.kernels import choose_for_spec
from cubridge.llm import LLMClient, LLMConfig, load_config
from cubridge.llm.loop import RoundsExhausted, ask_until_valid
from cubridge.llm_path.settings import StageSettings
from cubridge.rundir import RunDir
from cubridge.spec.loader import load

PASS_AT = (1, 3, 5)
MEASURES = ("ir", "compile", "gpu")


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k of n samples with c passing (None when k > n)."""
    if k > n:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class StageFigures:
    rounds: int = 0  # replies asked for
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    error: str | None = None  # the last error when the stage did not pass


@dataclass
class Sample:
    sample: int
    ir: bool = False
    compile: bool = False
    gpu: bool | None = None  # None: not run (no GPU, or nothing compiled)
    transfer: StageFigures = field(default_factory=StageFigures)
    lower: StageFigures | None = None
    time_ms: float | None = None  # the GPU-verified kernel at the timing shape


@dataclass
class SpecResult:
    spec: str
    path: str
    kernel: str = ""
    kernel_reason: str = ""
    skipped: str | None = None  # why no sample was drawn (rules path, load error)
    samples: list[Sample] = field(default_factory=list)
    source_causal_ms: float | None = None

    def passes(self, measure: str) -> int:
        return sum(1 for s in self.samples if getattr(s, measure) is True)

    def gpu_run(self) -> bool:
        return any(s.gpu is not None for s in self.samples)

    def pass_at(self, measure: str, k: int) -> float | None:
        if measure == "gpu" and not self.gpu_run():
            return None
        return pass_at_k(len(self.samples), self.passes(measure), k)


@dataclass
class EvalSettings:
    k: int = 5
    rounds: int = 4
    temperature: float | None = None
    arch: str = "sm_90a"
    kernel: str | None = None
    seq_len: int = 4096  # the timing shape's S (on a GPU)
    stage: StageSettings = field(default_factory=StageSettings)


def spec_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.glob("*.py") if not q.name.startswith("_"))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such spec file or folder")
    return out


def _figures(client: LLMClient, rounds: list[Any], started: float, error: str | None
             ) -> StageFigures:
    fig = StageFigures(rounds=len(rounds), seconds=time.perf_counter() - started, error=error)
    for r in rounds:
        usage = r.exchange.reply.usage
        fig.input_tokens += usage.input_tokens
        fig.output_tokens += usage.output_tokens
        fig.cost_usd += r.exchange.cost_usd or 0.0
    return fig


def _ask(client: LLMClient, messages: list[Any], check: Any, settings: EvalSettings,
         sample: int) -> tuple[Any, StageFigures]:
    started = time.perf_counter()
    try:
        outcome = ask_until_valid(client, messages, check, rounds=settings.rounds,
                                  sample=sample, temperature=settings.temperature)
    except RoundsExhausted as exc:
        return None, _figures(client, exc.rounds, started, exc.rounds[-1].error)
    return outcome.value, _figures(client, outcome.rounds, started, None)


def evaluate_spec(path: Path, config: LLMConfig, out: Path, settings: EvalSettings,
                  log: Any = print) -> SpecResult:
    from cubridge.build.nvcc import nvcc_available
    from cubridge.llm_path import lower as llm_lower
    from cubridge.llm_path.programs import IR_FILENAME, program_from_reply
    from cubridge.llm_path.transfer import transfer_messages
    from cubridge.pipeline.route import choose_path

    result = SpecResult(path.stem, str(path))
    try:
        spec = load(path)
        selection = choose_for_spec(spec, settings.arch, settings.kernel)
        kernel = selection.kernel
        route = choose_path(spec, kernel)
    except Exception as exc:  # noqa: BLE001 - a bad spec is a line of the report
        result.skipped = f"{type(exc).__name__}: {exc}"
        return result
    result.spec, result.kernel = spec.name, kernel.name
    result.kernel_reason = str(selection)
    if route.path == "rules":
        result.skipped = f"rules path ({route.reason}): no LLM task"
        return result
    gpu = torch.cuda.is_available()
    stage = settings.stage
    dtype = spec.dtypes[0]
    for s in range(settings.k):
        sample = Sample(s)
        run_dir = RunDir(out / spec.name / f"sample{s}", log=lambda _: None)
        client = LLMClient.from_config(config, run_dir.path, "transfer", log=lambda _: None)
        program, sample.transfer = _ask(
            client, transfer_messages(path, kernel),
            lambda reply: program_from_reply(reply, path, stage), settings, s)
        sample.ir = program is not None
        if program is not None and nvcc_available():
            target = run_dir.write(IR_FILENAME, program.source)
            started = time.perf_counter()
            inputs = llm_lower.lowering_inputs(target, kernel, path, settings.arch, stage)
            check_gpu = llm_lower.IsolatedGpuCheck(
                kernel=kernel, spec_path=Path(path), dtype=dtype, arch=settings.arch,
                seed=stage.seed, silence_s=stage.gpu_timeout_s,
                workdir=run_dir.file(llm_lower.GPU_CHECK_DIR),
                time_seq_len=settings.seq_len) if gpu else None
            client = LLMClient.from_config(config, run_dir.path, "lower", log=lambda _: None)
            compiled: list[bool] = []

            def check(reply: str, _inputs: Any = inputs, _gpu: Any = check_gpu,
                      _compiled: list[bool] = compiled) -> Any:
                # compiled within the budget, then (on a GPU) verified and timed in a
                # watched child: a compile failure raises before _compiled is marked
                lowered = llm_lower.check_lowering(reply, kernel, settings.arch,
                                                   _inputs.builds, dtype, None, _inputs.budgets)
                _compiled.append(True)
                if _gpu is not None:
                    checked = _gpu(lowered.compiled, lowered.source)
                    lowered.verification, lowered.time_ms = checked.verification, checked.time_ms
                return lowered

            lowered, sample.lower = _ask(client, inputs.messages, check, settings, s)
            sample.lower.seconds = time.perf_counter() - started  # the budget builds too
            sample.compile = bool(compiled)
            if gpu and compiled:
                sample.gpu = lowered is not None
                if lowered is not None:
                    sample.time_ms = lowered.time_ms
        result.samples.append(sample)
        log(f"[eval] {spec.name} sample {s}: IR {'pass' if sample.ir else 'FAIL'}, compile "
            f"{'pass' if sample.compile else 'FAIL'}, GPU "
            f"{'not run' if sample.gpu is None else 'pass' if sample.gpu else 'FAIL'}")
    if gpu and any(s.time_ms for s in result.samples):
        result.source_causal_ms = source_causal_ms(spec, kernel, settings)
    return result


def source_causal_ms(spec: Any, kernel: Any, settings: EvalSettings) -> float:
    """The unmodified library kernel's causal build at the timing shape."""
    import functools

    from cubridge.attention import default_scale
    from cubridge.bench.timing import TimingSettings, gpu_timer
    from cubridge.build.driver import device_arch
    from cubridge.llm_path.lower import reference_build

    cfg = spec.configs[0]
    dtype = spec.dtypes[0]
    build = reference_build(kernel, kernel.build_for(cfg.d, cfg.head_dim_v, {}, causal=True))
    dev = torch.device("cuda")
    ck = kernel.compile_build(build, dtype, device_arch(dev))
    runnable = kernel.attention_kernel(ck, build.head_dim, dtype)  # the expert's own source
    d = build.head_dim

    def impl(q, k, v):  # noqa: ANN001, ANN202
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        runnable.run(q, k, v, default_scale(d), [], out, lse)
        return out
    q = torch.randn(1, cfg.hq, settings.seq_len, d, device=dev, dtype=dtype)
    k = torch.randn(1, cfg.hk, settings.seq_len, d, device=dev, dtype=dtype)
    v = torch.randn(1, cfg.hk, settings.seq_len, d, device=dev, dtype=dtype)
    timer, _ = gpu_timer(TimingSettings())
    return float(timer(functools.partial(impl, q, k, v)))


# -- the report ------------------------------------------------------------------------------

def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def report_json(results: list[SpecResult], settings: EvalSettings, provider: str) -> dict:
    return {"provider": provider, "k": settings.k, "rounds": settings.rounds,
            "arch": settings.arch, "gpu": torch.cuda.is_available(),
            "pass_at": {r.spec: {m: {str(k): r.pass_at(m, k) for k in PASS_AT}
                                 for m in MEASURES}
                        for r in results if r.skipped is None},
            "specs": [asdict(r) for r in results]}


def report_markdown(results: list[SpecResult], settings: EvalSettings, provider: str) -> str:
    gpu = torch.cuda.is_available()
    lines = [f"# cubridge eval: {provider}, k = {settings.k}, rounds = {settings.rounds}, "
             f"{settings.arch}", ""]
    if not gpu:
        lines += ["No CUDA GPU here: GPU verification was not run (n/a), never counted as "
                  "passed.", ""]
    lines += ["| spec | kernel | n | " + " | ".join(
        f"{m} pass@{k}" for m in MEASURES for k in PASS_AT) + " |",
        "|---|---|---|" + "---|" * (len(MEASURES) * len(PASS_AT))]
    for r in results:
        if r.skipped is not None:
            continue
        cells = [_fmt(r.pass_at(m, k)) for m in MEASURES for k in PASS_AT]
        lines.append(f"| {r.spec} | {r.kernel} | {len(r.samples)} | " + " | ".join(cells) + " |")
    lines += ["", "Per stage, mean over samples (replies, tokens in/out, cost, seconds):", "",
              "| spec | transfer replies | transfer tokens | transfer $ | transfer s | "
              "lower replies | lower tokens | lower $ | lower s | kernel ms | source causal ms "
              "| vs source causal |", "|---|" + "---|" * 11]
    for r in results:
        if r.skipped is not None or not r.samples:
            continue
        n = len(r.samples)
        tr = [s.transfer for s in r.samples]
        lo = [s.lower for s in r.samples if s.lower is not None]

        def mean(xs: list[float]) -> float | None:
            return sum(xs) / len(xs) if xs else None

        def stage_cells(figs: list[StageFigures]) -> list[str]:
            if not figs:
                return ["n/a"] * 4
            return [_fmt(mean([f.rounds for f in figs])),
                    f"{mean([f.input_tokens for f in figs]):.0f}/"
                    f"{mean([f.output_tokens for f in figs]):.0f}",
                    f"{mean([f.cost_usd for f in figs]):.4f}",
                    _fmt(mean([f.seconds for f in figs]))]

        times = [s.time_ms for s in r.samples if s.time_ms]
        best = min(times) if times else None
        ratio = (r.source_causal_ms / best) if best and r.source_causal_ms else None
        lines.append(f"| {r.spec} | " + " | ".join(
            [*stage_cells(tr), *stage_cells(lo), _fmt(best), _fmt(r.source_causal_ms),
             f"{ratio:.2f}x" if ratio else "n/a"]) + " |")
        del n
    skipped = [r for r in results if r.skipped is not None]
    if skipped:
        lines += ["", "Not evaluated:", ""] + [f"- {r.spec}: {r.skipped}" for r in skipped]
    lines += ["", "Kernels: " + "; ".join(f"{r.spec}: {r.kernel_reason}" for r in results
                                          if r.kernel_reason)]
    return "\n".join(lines) + "\n"


def report_plot(results: list[SpecResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [r for r in results if r.skipped is None]
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(evaluated)), 3.5))
    width = 0.25
    for i, m in enumerate(MEASURES):
        vals = [r.pass_at(m, 1) for r in evaluated]
        xs = [j + (i - 1) * width for j in range(len(evaluated))]
        ax.bar(xs, [v or 0.0 for v in vals], width, label=f"{m} pass@1")
        for x, v in zip(xs, vals, strict=True):
            if v is None:
                ax.text(x, 0.02, "n/a", ha="center", fontsize=7, rotation=90)
    ax.set_xticks(range(len(evaluated)), [r.spec for r in evaluated], rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass@1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def evaluate(paths: list[Path], out: Path, settings: EvalSettings,
             config: LLMConfig | None = None, log: Any = print) -> list[SpecResult]:
    config = config or load_config()
    results = [evaluate_spec(p, config, out, settings, log) for p in spec_files(paths)]
    out.mkdir(parents=True, exist_ok=True)
    provider = f"{config.provider}/{config.model or config.provider}"
    (out / "eval.json").write_text(json.dumps(report_json(results, settings, provider),
                                              indent=1))
    (out / "eval.md").write_text(report_markdown(results, settings, provider))
    report_plot(results, out / "eval.png")
    return results
