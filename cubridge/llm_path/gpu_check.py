"""GPU verification and timing of a lowered candidate, in a watched child process.

An LLM-edited kernel is untrusted code on the GPU: an illegal address poisons the
CUDA context of the process that launched it, and a barrier that never completes
blocks that process for good. So the lowering stage never launches a candidate
itself. It writes a job (the edited source, the builds, the spec) and runs this
module as a child (`python -m cubridge.llm_path.gpu_check JOB.json`) under the
watchdog (cubridge.llm.sandbox.watchdog): the child verifies every build against
the spec, reporting each case as it finishes, then times the first build. A
fault, a trap or a hang ends the child, not the tool, and comes back as
`Rejected` with a precise message: the failing build and case, the CUDA error or
the signal, and, where compute-sanitizer is installed, its memcheck report of the
faulting case (the access, the kernel's source line, the thread and block).
Without compute-sanitizer the message says so. A hang is a child that reports
nothing for `StageSettings.gpu_timeout_s` seconds.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cubridge
from cubridge.build.sanitizer import find_compute_sanitizer, sanitizer_argv, sanitizer_findings
from cubridge.llm.loop import Rejected
from cubridge.llm.sandbox.watchdog import SILENT, Watched, emit, run_watched

STARTUP_S = 300.0  # importing torch, starting CUDA and loading the cubins in a fresh process
TOTAL_S = 3600.0  # the whole job, however steadily it reports
SANITIZER_SILENCE_S = 600.0  # one case under memcheck: every kernel instrumented
MAX_FAILURES = 8
TIME_SEQ_LEN = 4096  # timing shape: the first matching head config, B = 1, Sq = Sk
_PACKAGE_ROOT = str(Path(cubridge.__file__).resolve().parent.parent)
CHILD = [sys.executable, "-m", "cubridge.llm_path.gpu_check"]


class CaseError(Exception):
    """A verification case raised on the GPU (a CUDA error leaves the context
    unusable): nothing after it counts, so the child stops there."""


@dataclass
class GpuJob:
    """What the child checks (JSON-able)."""

    kernel_dir: str
    source_file: str  # the edited CUDA source
    builds: list[dict[str, Any]]  # KernelBuild.to_json()
    dtype: str
    arch: str
    spec_path: str
    seed: int | None
    time_seq_len: int | None = TIME_SEQ_LEN  # None: verify only
    # Only these cases: (build index, [b, hq, hk, sq, sk, d, dv], distribution); the
    # sanitizer's rerun of the faulting one.
    only: list[Any] | None = None


@dataclass
class GpuCheckResult:
    verification: str  # the verifier's summary per build
    time_ms: float | None = None  # the first build on its first head config, B = 1
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def device(self) -> str:
        ready = next((e for e in self.events if e.get("event") == "ready"), None)
        return str(ready.get("device", "")) if ready else ""


# -- the child ---------------------------------------------------------------------------------

def launcher(kernel: Any, build: Any, dtype: Any, compiled: Any) -> Callable[..., Any]:
    """impl(q, k, v, scale=None, **aux) of one compiled build (aux in make_aux order)."""
    import torch

    from cubridge.attention import default_scale

    runnable = kernel.attention_kernel(compiled, build.head_dim, dtype)

    def impl(q, k, v, scale=None, **aux):  # noqa: ANN001, ANN202
        b, hq, sq, d = q.shape
        out = torch.empty((b, hq, sq, v.shape[3]), dtype=q.dtype, device=q.device)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
        s = default_scale(d) if scale is None else float(scale)
        runnable.run(q, k, v, s, list(aux.values()), out, lse)
        return out, lse

    return impl


def build_shapes(spec: Any, build: Any) -> list[Any]:
    from cubridge.spec.shapes import fit_shapes, verification_shapes

    return fit_shapes(spec, verification_shapes(
        [c for c in spec.configs if (c.d, c.head_dim_v) == build.dims]))


def _shape_json(shape: Any) -> list[int | None]:
    return [shape.b, shape.hq, shape.hk, shape.sq, shape.sk, shape.d, shape.dv]


def _build_name(build: Any) -> str:
    return "D{}_Dv{}".format(*build.dims)


def _verify_build(spec: Any, impl: Callable[..., Any], build: Any, index: int, dtype: Any,
                  job: GpuJob) -> Any:
    from cubridge.attention import Shape
    from cubridge.spec import DISTRIBUTIONS
    from cubridge.verify import verify

    shapes = build_shapes(spec, build)
    distributions = list(DISTRIBUTIONS)
    if job.only is not None:
        picked = [(Shape(*s), dist) for i, s, dist in job.only if i == index]
        shapes, distributions = [s for s, _ in picked][:1], [d for _, d in picked][:1]
        if not shapes:
            return None
    emit("build", build=_build_name(build), index=index,
         cases=[[_shape_json(s), d] for s, d in itertools.product(shapes, distributions)])

    def progress(done: int, total: int, case: Any) -> None:
        emit("case", build=_build_name(build), done=done, total=total, verdict=case.verdict)
        if case.verdict == "error":
            raise CaseError(case.reason)

    return verify(spec, impl, device="cuda", dtypes=[dtype], shapes=shapes,
                  distributions=distributions, seed=job.seed, require_lse=spec.returns_lse,
                  progress=progress)


def _time_first_build(spec: Any, impl: Callable[..., Any], build: Any, dtype: Any,
                      seq_len: int) -> float:
    import torch

    from cubridge.attention import Shape
    from cubridge.bench.timing import TimingSettings, gpu_timer

    timer, _ = gpu_timer(TimingSettings())
    cfg = next(c for c in spec.configs if (c.d, c.head_dim_v) == build.dims)
    dev = torch.device("cuda")
    q = torch.randn(1, cfg.hq, seq_len, cfg.d, device=dev, dtype=dtype)
    k = torch.randn(1, cfg.hk, seq_len, cfg.d, device=dev, dtype=dtype)
    v = torch.randn(1, cfg.hk, seq_len, cfg.head_dim_v, device=dev, dtype=dtype)
    shape = Shape.from_config(cfg, b=1, sq=seq_len)
    aux = ({n: t.to(dev) for n, t in spec.make_aux(shape, torch.Generator().manual_seed(0),
                                                      torch.device("cpu")).items()}
           if spec.make_aux else {})
    return float(timer(functools.partial(impl, q, k, v, **aux)))


def run_job(job: GpuJob) -> None:
    """The child's work; reports through `emit`."""
    import torch

    from cubridge.kernels import KernelBuild
    from cubridge.kernels.library import load_kernel
    from cubridge.spec.loader import load, parse_dtype

    kernel = load_kernel(Path(job.kernel_dir))
    spec = load(job.spec_path)
    dtype = parse_dtype(job.dtype)
    source = Path(job.source_file).read_text()
    torch.cuda.init()
    impls = []
    for data in job.builds:
        build = KernelBuild.from_json(data)
        compiled = kernel.compile_build(build, dtype, job.arch, source=source)  # cached cubin
        impls.append((build, launcher(kernel, build, dtype, compiled)))
    emit("ready", device=torch.cuda.get_device_name())
    summaries = []
    for index, (build, impl) in enumerate(impls):
        report = _verify_build(spec, impl, build, index, dtype, job)
        if report is None:
            continue
        if not report.passed:
            failures = [f"{c.verdict}: {c.shape} {c.distribution}: {c.reason}"
                        for c in report.failures[:MAX_FAILURES]]
            emit("verified", ok=False, summary=report.summary(), failures=failures)
            return
        summaries.append(report.summary())
    emit("verified", ok=True, summary="; ".join(summaries))
    if job.time_seq_len and job.only is None:
        build, impl = impls[0]
        emit("timed", ms=_time_first_build(spec, impl, build, dtype, job.time_seq_len))


def _is_cuda_error(message: str) -> bool:
    return any(m in message for m in ("CUDA", "cuda", "illegal", "launch failure", "trap"))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m cubridge.llm_path.gpu_check JOB.json", file=sys.stderr)
        return 2
    job = GpuJob(**json.loads(Path(args[0]).read_text()))
    try:
        run_job(job)
    except CaseError as exc:
        emit("fault", message=str(exc), cuda=_is_cuda_error(str(exc)))
        return 3
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        emit("error", message=f"{type(exc).__name__}: {exc}",
             traceback=traceback.format_exc(limit=6))
        return 1
    return 0


# -- the parent --------------------------------------------------------------------------------

def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def failing_case(watched: Watched) -> tuple[int, list[Any], str] | None:
    """(build index, shape, distribution) of the case running when the child ended:
    the one after the last reported case of the last build started."""
    build = watched.last("build")
    if build is None:
        return None
    done = 0
    for event in watched.events[watched.events.index(build):]:
        if event.get("event") == "case":
            done = int(event["done"])
    # A CUDA fault is reported by the case it happened in, a crash or hang is not.
    if watched.last("fault") is not None:
        done -= 1
    cases = build["cases"]
    if not 0 <= done < len(cases):
        return None
    shape, dist = cases[done]
    return int(build["index"]), shape, dist


def _where(watched: Watched) -> str:
    case = failing_case(watched)
    build = watched.last("build")
    if case is None or build is None:
        return "before the first verification case" if watched.last("ready") is None \
            else "between verification cases"
    _, shape, dist = case
    b, hq, hk, sq, sk, d, dv = shape
    return (f"build {build['build']}, verification case B={b} Hq={hq} Hk={hk} Sq={sq} "
            f"Sk={sk} D={d}{'' if dv is None else f' Dv={dv}'}, {dist} inputs")


class IsolatedGpuCheck:
    """check(compiled, source) for check_lowering: verification and timing of one
    candidate in a watched child; Rejected with a precise message otherwise."""

    def __init__(self, *, kernel: Any, spec_path: Path, dtype: Any, arch: str,
                 seed: int | None, silence_s: float, workdir: Path | None = None,
                 child: Sequence[str] = CHILD, sanitizer: Path | None | bool = True,
                 time_seq_len: int | None = TIME_SEQ_LEN) -> None:
        self.kernel, self.spec_path, self.dtype, self.arch = kernel, spec_path, dtype, arch
        self.seed, self.silence_s, self.time_seq_len = seed, silence_s, time_seq_len
        self.workdir = workdir
        self.child = list(child)
        # True: look for it at the first fault; None/False: do not use it; a path: use it.
        self._sanitizer: Path | None | bool = sanitizer
        self.checks = 0

    def sanitizer(self) -> Path | None:
        if self._sanitizer is True:
            self._sanitizer = find_compute_sanitizer()
        return self._sanitizer or None  # type: ignore[return-value]

    def _job_file(self, job: GpuJob, name: str) -> Path:
        folder = Path(self.workdir or tempfile.mkdtemp(prefix="cubridge-gpu-check-"))
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(json.dumps(asdict(job), indent=1))
        return path

    def _run(self, job: GpuJob, name: str, prefix: Sequence[str] = (),
             silence_s: float | None = None) -> Watched:
        path = self._job_file(job, name)
        return run_watched([*prefix, *self.child, str(path)],
                           silence_s=silence_s or self.silence_s, startup_s=STARTUP_S,
                           total_s=TOTAL_S, env=_child_env())

    def __call__(self, compiled: list[Any], source: str) -> GpuCheckResult:
        self.checks += 1
        n = self.checks
        folder = Path(self.workdir or tempfile.mkdtemp(prefix="cubridge-gpu-check-"))
        folder.mkdir(parents=True, exist_ok=True)
        self.workdir = folder
        source_file = folder / f"candidate{n}.cu"
        source_file.write_text(source)
        job = GpuJob(str(self.kernel.directory), str(source_file),
                     [build.to_json() for build, _ in compiled],
                     str(self.dtype).removeprefix("torch."), self.arch, str(self.spec_path),
                     self.seed, self.time_seq_len)
        watched = self._run(job, f"candidate{n}.json")
        verified = watched.last("verified")
        if verified is not None and not verified["ok"]:
            raise Rejected("the compiled kernel fails the spec on the GPU: "
                           f"{verified['summary']}\n" + "\n".join(verified["failures"]))
        if watched.ok and verified is not None:
            timed = watched.last("timed")
            return GpuCheckResult(verified["summary"],
                                  float(timed["ms"]) if timed is not None else None,
                                  watched.events)
        if verified is not None and verified["ok"] and watched.last("timed") is None:
            raise Rejected("the kernel passed verification on the GPU, then failed while it "
                           f"was timed ({self.time_seq_len} keys): {self._cause(watched)}")
        raise Rejected(self._failure_message(job, watched, n))

    @staticmethod
    def _cause(watched: Watched) -> str:
        for tag in ("fault", "error"):
            event = watched.last(tag)
            if event is not None:
                return event["message"]
        return watched.failure()

    def _failure_message(self, job: GpuJob, watched: Watched, n: int) -> str:
        where = _where(watched)
        if watched.ended == SILENT:
            return (f"the kernel hung on the GPU at {where}: {watched.failure()}. Every "
                    "thread of a CTA must reach each __syncthreads / named barrier, every "
                    "mbarrier wait needs its arrivals (and transaction bytes), and every "
                    "loop needs a bound that holds for the tails (Sq, Sk not multiples of "
                    "the tile).")
        fault, error = watched.last("fault"), watched.last("error")
        if fault is not None:
            lines = [f"the kernel failed on the GPU at {where}: {fault['message']}"]
            memory = bool(fault.get("cuda"))
        elif error is not None:
            lines = [f"the GPU check raised at {where}: {error['message']}",
                     str(error.get("traceback", "")).rstrip()]
            memory = _is_cuda_error(error["message"])
        else:
            lines = [f"the kernel took its process down on the GPU at {where}: "
                     f"{watched.failure()}"]
            tail = (watched.stderr or watched.output).strip().splitlines()[-12:]
            if tail:
                lines.append("the process's last output:\n" + "\n".join(tail))
            memory = True
        if memory:
            lines.append(self._sanitizer_report(job, watched, n))
        return "\n".join(line for line in lines if line)

    def _sanitizer_report(self, job: GpuJob, watched: Watched, n: int) -> str:
        case = failing_case(watched)
        if case is None:
            return ""
        sanitizer = self.sanitizer()
        if sanitizer is None:
            return ("(compute-sanitizer is not installed here, so there is no report of the "
                    "faulting access; the CUDA error above is all there is)")
        rerun = GpuJob(**{**asdict(job), "time_seq_len": None, "only": [list(case)]})
        checked = self._run(rerun, f"candidate{n}-sanitizer.json",
                            prefix=sanitizer_argv(sanitizer), silence_s=SANITIZER_SILENCE_S)
        findings = sanitizer_findings(checked.output)
        if not findings:
            return (f"(compute-sanitizer memcheck on that case reported nothing: "
                    f"{checked.failure() if not checked.ok else 'it passed there'})")
        return "compute-sanitizer memcheck on that case:\n" + "\n".join(findings)


if __name__ == "__main__":
    raise SystemExit(main())
