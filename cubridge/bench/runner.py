"""The benchmark loop: for each variant, head config and sequence length, make
one set of inputs, count allowed pairs, compute the float64 reference, then for
each implementation: prepare, run once, check, and only then time. With several
rounds the implementations take turns, round after round, on the same inputs, and
each keeps the median of its times: the GPU's clock and thermal state then weigh
on every implementation alike."""

from __future__ import annotations

import dataclasses
import gc
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from cubridge.attention import HEAD_CONFIGS, HeadConfig, Shape
from cubridge.bench.case import Case, case_scale, make_aux_on
from cubridge.bench.check import check_output, tolerance_for
from cubridge.bench.distance_mods import distance_table_mods
from cubridge.bench.oracle import float64_reference, mods_agree_with_reference
from cubridge.bench.peers import Impl, Unsupported
from cubridge.bench.timing import Timer
from cubridge.bench.work import count_work
from cubridge.spec.inputs import make_qkv
from cubridge.spec.model import Spec
from cubridge.spec.mods import bind_mods
from cubridge.verify.error_text import error_summary

STANDARD_CONFIGS = HEAD_CONFIGS
# Statuses of one implementation on one case.
OK, WRONG, UNSUPPORTED = "ok", "wrong", "unsupported"
OOM, ERROR, SKIPPED = "oom", "error", "skipped"


@dataclass(frozen=True)
class BenchConfig:
    seq_lens: Sequence[int] = (1024, 2048, 4096, 8192)
    configs: Sequence[str] = ("llama2_7b", "qwen25_72b")
    tokens: int = 16384  # per batch: B = tokens // S
    dtype: torch.dtype = torch.bfloat16
    seed: int = 0
    device: str = "cuda"
    rounds: int = 1  # interleaved timing rounds per case (median)

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {self.rounds}")


@dataclass
class ImplResult:
    impl: str
    status: str
    time_ms: float | None = None
    tflops: float | None = None
    rel_err: float | None = None
    max_abs: float | None = None
    note: str = ""
    reason: str = ""


@dataclass
class CaseResult:
    variant: str
    config: str
    seq_len: int
    batch: int
    hq: int
    hk: int
    d: int
    allowed_pairs: int
    density: float
    structure: str
    flops: float
    reference: str
    impls: list[ImplResult] = field(default_factory=list)
    counting: str = ""  # how allowed_pairs and flops were obtained (cubridge.bench.work)
    seq_len_k: int | None = None  # keys, where they differ from seq_len (queries)
    dtype: str = "bf16"  # of q, k, v (a spec that lists only fp16 is timed in fp16)

    def to_json(self) -> dict:
        return asdict(self)


def dtype_label(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def head_config(spec: Spec, name: str) -> HeadConfig:
    """The spec's head config of that name, else the standard one (docs/benchmark.md)."""
    for cfg in spec.configs:
        if cfg.name == name:
            return cfg
    if name in STANDARD_CONFIGS:
        return STANDARD_CONFIGS[name]
    known = sorted({c.name for c in spec.configs} | set(STANDARD_CONFIGS))
    raise ValueError(f"spec {spec.name!r}: unknown head config {name!r}; known: {known}")


def _free(device: torch.device) -> None:
    """Give the previous impl's memory back before the next one runs."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _inputs(case: Case) -> list[torch.Tensor]:
    return [case.q, case.k, case.v, *case.aux.values()]


def _restore_inputs(case: Case, pristine: list[torch.Tensor]) -> bool:
    """Put back inputs an impl wrote to; True if any had changed."""
    changed = False
    for now, before in zip(_inputs(case), pristine, strict=True):
        if not torch.equal(now, before):
            now.copy_(before)
            changed = True
    return changed


def measure(impl: Impl, case: Case, ref: torch.Tensor, timer: Timer,
            pristine: list[torch.Tensor]) -> ImplResult:
    """Prepare, run once, check against the reference, and time only if right.
    An impl that writes to its inputs fails (the next impl gets them restored)."""
    note = ""
    try:
        prepared = impl.prepare(case)
        note = prepared.note
        out = prepared.to_standard(prepared.run())
        check = check_output(out, ref, case.v, tolerance_for(case.spec, case.dtype))
        del out
        if _restore_inputs(case, pristine):
            return ImplResult(impl.name, WRONG, note=note, reason="modified its inputs")
        if not check.ok:
            return ImplResult(impl.name, WRONG, rel_err=check.rel_err, max_abs=check.max_abs,
                              note=note, reason=f"failed verification: {check.reason}")
        ms = timer(prepared.run)
        if _restore_inputs(case, pristine):
            return ImplResult(impl.name, WRONG, note=note, reason="modified its inputs")
        tflops = case.flops / (ms * 1e-3) / 1e12
        return ImplResult(impl.name, OK, ms, tflops, check.rel_err, check.max_abs, note)
    except Unsupported as exc:
        return ImplResult(impl.name, UNSUPPORTED, note=note, reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - a failing peer is recorded, the run goes on
        status = OOM if _is_oom(exc) else ERROR
        return ImplResult(impl.name, status, note=note, reason=error_summary(exc))
    finally:
        _free(case.device)


def build_case(spec: Spec, cfg: HeadConfig, seq_len: int, config: BenchConfig,
               shape: Shape | None = None) -> Case:
    """The inputs of one case: B = tokens // seq_len and Sq = Sk = seq_len,
    unless `shape` gives them (mods whose captured tensors fix B, Sq and Sk)."""
    if shape is None:
        if seq_len > config.tokens or config.tokens % seq_len:
            raise ValueError(f"sequence length {seq_len} does not divide {config.tokens} tokens")
        shape = Shape.from_config(cfg, config.tokens // seq_len, seq_len)
    device = torch.device(config.device)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    q, k, v = make_qkv(shape, config.dtype, "normal", gen)  # never zeros: docs/benchmark.md
    aux = make_aux_on(spec, shape, config.seed, device)
    mods = bind_mods(spec, aux)
    work = count_work(spec, mods, shape, device, seed=config.seed)
    return Case(spec=spec, shape=shape, dtype=config.dtype, q=q, k=k, v=v, aux=aux, mods=mods,
                scale=case_scale(spec, shape), config=cfg, stats=work.stats, flops=work.flops,
                counting=work.counting,
                precomputed_score_mod=distance_table_mods(spec, aux, shape, device),
                score_mask_mod=work.score_mask_mod)


def run_case(spec: Spec, cfg: HeadConfig, seq_len: int, impls: Sequence[Impl],
             config: BenchConfig, timer: Timer,
             progress: Callable[[str], None] = print, shape: Shape | None = None) -> CaseResult:
    case = build_case(spec, cfg, seq_len, config, shape)
    s, st = case.shape, case.stats
    result = CaseResult(spec.name, cfg.name, s.sq, s.b, s.hq, s.hk, s.d, st.allowed_pairs,
                        st.density, st.structure, case.flops, reference="",
                        counting=case.counting, seq_len_k=s.sk if s.sk != s.sq else None,
                        dtype=dtype_label(config.dtype))
    try:
        agree, why = mods_agree_with_reference(spec, s, case.device, seed=config.seed)
    except Exception as exc:  # noqa: BLE001 - fall back to the spec's reference
        agree, why = False, f"mods check failed: {error_summary(exc)}"
    try:
        ref = float64_reference(spec, case.q, case.k, case.v, case.aux, case.mods, agree)
    except Exception as exc:  # noqa: BLE001 - nothing can be verified, so nothing is timed
        _free(case.device)
        result.reference = f"unavailable: {error_summary(exc)} ({why})"
        result.impls = [ImplResult(i.name, SKIPPED, reason="no float64 reference to verify "
                                   "against") for i in impls]
        progress(f"{spec.name} {cfg.name} S={seq_len}: {result.reference}")
        return result
    result.reference = ref.method if agree else f"{ref.method} ({why})"
    pristine = [t.clone() for t in _inputs(case)]
    rounds: list[list[tuple[int, ImplResult]]] = [[] for _ in impls]  # per impl, by position
    for k in range(config.rounds):
        # Each round starts one implementation later, so none is always timed first.
        shift = k % len(impls) if impls else 0
        for j in [*range(shift, len(impls)), *range(shift)]:
            impl, done = impls[j], rounds[j]
            if done and done[-1][1].status != OK:
                continue  # (a failure stands; it is not retried)
            r = measure(impl, case, ref.out, timer, pristine)
            done.append((k + 1, r))
            what = (f"{r.tflops:7.1f} TFLOP/s ({r.time_ms:.3f} ms)" if r.status == OK
                    else f"{r.status}: {r.reason}")
            turn = f" round {k + 1}" if config.rounds > 1 else ""
            progress(f"{spec.name:<28} {cfg.name:<11} S={seq_len:<5} {impl.name:<12} {what}{turn}")
    # (what an impl cannot express is no round's failure: its reason stays as it is)
    result.impls = [done[0][1] if config.rounds == 1 or done[0][1].status == UNSUPPORTED
                    else median_result(done, config.rounds, case.flops, "round")
                    for done in rounds]
    del ref, case, pristine
    _free(torch.device(config.device))
    return result


# Which failure a combined result keeps when repeats disagree: the worst (a repeat that
# did not verify or run outranks the others, so a median never hides it).
_WORST_FIRST = ("wrong", "error", "oom", "unsupported", "skipped")


def median_result(numbered: Sequence[tuple[int, ImplResult]], repeats: int, flops: float,
                  unit: str) -> ImplResult:
    """One implementation's result from its (repeat number, result) pairs, the repeats
    being a run's interleaved rounds (unit "round") or whole runs (unit "run",
    `cubridge bench --merge --median`): the median of its verified times (TFLOP/s from
    that time, the largest error of any, the times in its note); one that failed or did
    not run in any repeat keeps that status, naming the repeat ("round 2 of 3: ...")."""
    bad = [(k, r) for k, r in numbered if r.status != OK]
    if bad:
        k, worst = min(bad, key=lambda kr: _WORST_FIRST.index(kr[1].status)
                       if kr[1].status in _WORST_FIRST else len(_WORST_FIRST))
        return dataclasses.replace(worst, reason=f"{unit} {k} of {repeats}: {worst.reason}")
    runs = [r for _, r in numbered]
    times = [r.time_ms for r in runs]
    ms = statistics.median(times)
    of = (f"{len(times)} {unit}s" if len(times) == repeats
          else f"{len(times)} of {repeats} {unit}s")
    times_note = f"median of {of}: " + " / ".join(f"{t:.3f}" for t in times) + " ms"
    return ImplResult(runs[0].impl, OK, ms, flops / (ms * 1e-3) / 1e12,
                      max(r.rel_err for r in runs), max(r.max_abs for r in runs),
                      "; ".join(x for x in (runs[0].note, times_note) if x))


def run_bench(specs: Sequence[Spec], impls: Sequence[Impl], config: BenchConfig, timer: Timer,
              progress: Callable[[str], None] = print) -> list[CaseResult]:
    """Every spec x head config x sequence length, every impl on the same inputs."""
    results = []
    for spec in specs:
        for cfg_name in config.configs:
            cfg = head_config(spec, cfg_name)
            for seq_len in config.seq_lens:
                try:
                    results.append(run_case(spec, cfg, seq_len, impls, config, timer, progress))
                except Exception as exc:  # noqa: BLE001 - record the broken case, go on
                    _free(torch.device(config.device))
                    results.append(failed_case(spec, cfg, seq_len, impls, config, exc))
                    progress(f"{spec.name} {cfg.name} S={seq_len}: {results[-1].reference}")
    return results


def failed_case(spec: Spec, cfg: HeadConfig, seq_len: int, impls: Sequence[Impl],
                config: BenchConfig, exc: BaseException) -> CaseResult:
    """A case whose inputs, aux or pair count could not be built."""
    batch = config.tokens // seq_len if seq_len else 0
    return CaseResult(spec.name, cfg.name, seq_len, batch, cfg.hq, cfg.hk, cfg.d, 0, 0.0,
                      "unknown", 0.0, reference=f"case failed: {error_summary(exc)}",
                      counting="not counted: the case failed", dtype=dtype_label(config.dtype),
                      impls=[ImplResult(i.name, SKIPPED, reason="case failed") for i in impls])
