"""`cubridge bench`: measure our kernel and the peers on docs/benchmark.md's workload."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

import torch

from cubridge.bench.ours import DEFAULT_OURS, external_impl
from cubridge.bench.peers import PEERS, peer_impls
from cubridge.bench.timing import TimingSettings, gpu_timer, wallclock_timer
from cubridge.spec.model import Spec

# The variants of docs/benchmark.md, in its order; specs in examples/specs/<name>.py.
BENCHMARK_VARIANTS = [
    "full", "causal", "sliding_window_1024", "global_sliding_window", "prefix_lm",
    "document_causal", "share_question", "causal_blockwise", "alibi_causal", "softcap_causal",
    "relative_position", "relu_causal", "sigmoid_causal", "comb_prefix_softcap_sigmoid",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = REPO_ROOT / "examples" / "specs"
RESULTS_DIR = REPO_ROOT / "bench" / "results"


def resolve_spec_path(name_or_path: str) -> Path:
    """A spec file path, or a variant name looked up in examples/specs/."""
    path = Path(name_or_path)
    if path.suffix == ".py":
        if not path.is_file():
            raise FileNotFoundError(f"spec file {path} does not exist")
        return path
    candidate = SPEC_DIR / f"{name_or_path}.py"
    if not candidate.is_file():
        known = sorted(p.stem for p in SPEC_DIR.glob("*.py") if not p.stem.startswith("_"))
        raise FileNotFoundError(f"no spec {name_or_path!r}: {candidate} does not exist "
                                f"(known: {', '.join(known) or 'none'})")
    return candidate


def load_specs(names: list[str]) -> list[Spec]:
    try:
        from cubridge.spec import load
    except ImportError as exc:
        raise RuntimeError(f"cubridge.spec.load is not available ({exc})") from exc
    return [load(resolve_spec_path(n)) for n in names]


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in _csv(text)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from exc


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {n}")
    return n


def _impl_arg(text: str) -> tuple[str, str]:
    name, sep, target = text.partition("=")
    if not sep or not name or not target:
        raise argparse.ArgumentTypeError(f"expected NAME=TARGET, got {text!r}")
    return name, target


def default_run_name(device: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:24]
    return f"{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{slug}"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench", help="time our kernel and the peers (docs/benchmark.md), verified before timing",
        description="Benchmark implementations of attention variants on the GPU. Every output "
        "is checked against a float64 reference before its time counts; TFLOP/s are on "
        "allowed (q, k) pairs. Writes results.json, results.md, results.png and, with our "
        "kernel among the implementations, summary.md (ours against the best peer and our "
        "own causal).")
    p.add_argument("variants", nargs="*", metavar="VARIANT",
                   help="variant names (examples/specs/NAME.py) or spec files")
    p.add_argument("--all", action="store_true", help="every variant of docs/benchmark.md")
    p.add_argument("--seq-lens", type=_ints, default=[1024, 2048, 4096, 8192],
                   help="comma-separated sequence lengths (default 1024,2048,4096,8192)")
    p.add_argument("--configs", type=_csv, default=["llama2_7b", "qwen25_72b"],
                   help="head configs: the spec's, or llama2_7b, qwen25_72b, llama31_405b "
                   "(default llama2_7b,qwen25_72b)")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per batch: B = tokens / S")
    p.add_argument("--peers", type=_csv, default=list(PEERS),
                   help=f"peers to run (default {','.join(PEERS)})")
    p.add_argument("--ours", default=DEFAULT_OURS, metavar="TARGET",
                   help="our implementation: MODULE:FUNC, FILE.py:FUNC, a run directory, or a "
                   "folder of them (each variant takes its newest VARIANT-* run) "
                   f"(default {DEFAULT_OURS}); 'none' to leave it out")
    p.add_argument("--impl", type=_impl_arg, action="append", default=[],
                   metavar="NAME=TARGET", help="another implementation to time (repeatable)")
    p.add_argument("--warmup-ms", type=float, default=25.0, help="do_bench warm-up (ms)")
    p.add_argument("--rep-ms", type=float, default=100.0, help="do_bench repetition time (ms)")
    p.add_argument("--rounds", type=_positive, default=1,
                   help="timing rounds per case: the implementations take turns, round after "
                   "round, on the same inputs, and each keeps its median time (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a smoke test of the pipeline with wall-clock timings that "
                   "measure nothing (default cuda)")
    p.add_argument("--name", help="results folder name (default: date and device)")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR,
                   help=f"parent of the results folder (default {RESULTS_DIR})")
    p.add_argument("--render", type=Path, metavar="RESULTS_JSON",
                   help="only re-render results.md and results.png beside an existing JSON")
    p.add_argument("--merge", type=Path, nargs="+", metavar="RESULTS_JSON",
                   help="combine results of several runs on one device (e.g. runs split to fit "
                   "a time limit) into --out-dir/--name")
    p.add_argument("--median", action="store_true",
                   help="with --merge: runs that repeat the same cases give one result per "
                   "case, each implementation's median time (a failure in any repeat stays)")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    # Imported here so that `cubridge --help` stays fast and independent of them.
    from cubridge.bench.report import (
        collect_metadata,
        invocation,
        load_json,
        markdown_table,
        merge_results,
        write_reports,
    )
    from cubridge.bench.runner import BenchConfig, run_bench

    if args.median and not args.merge:
        print("cubridge bench: --median combines the runs given to --merge", file=sys.stderr)
        return 2
    if args.merge:
        try:
            meta, results = merge_results([load_json(p) for p in args.merge],
                                          median=args.median)
        except ValueError as exc:
            print(f"cubridge bench: {exc}", file=sys.stderr)
            return 2
        out_dir = args.out_dir / (args.name or f"merged-{default_run_name(meta['device'])}")
        paths = write_reports(out_dir, meta, results)
        print(markdown_table(results))
        print("\n".join(f"{k}: {v}" for k, v in paths.items()))
        return 0
    if args.render is not None:
        meta, results = load_json(args.render)
        paths = write_reports(args.render.parent, meta, results)
        print("\n".join(f"{k}: {v}" for k, v in paths.items()))
        return 0
    names = BENCHMARK_VARIANTS if args.all else args.variants
    if not names:
        print("cubridge bench: name variants (e.g. full causal) or pass --all", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"cubridge bench: no CUDA GPU is visible (torch {torch.__version__}, CUDA "
              f"{torch.version.cuda or 'none'}); benchmarks measure on a GPU. "
              "`cubridge doctor` lists what this machine has.", file=sys.stderr)
        return 2
    try:
        specs = load_specs(names)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"cubridge bench: {exc}", file=sys.stderr)
        return 2
    impls = []
    if args.ours.lower() != "none":
        impls.append(external_impl("ours", args.ours))
    impls += [external_impl(name, target) for name, target in args.impl]
    impls += peer_impls(args.peers)
    repeated = sorted({i.name for i in impls if [j.name for j in impls].count(i.name) > 1})
    if repeated:
        print(f"cubridge bench: two implementations named {', '.join(repeated)}; results are "
              "reported by name, so give each --impl its own", file=sys.stderr)
        return 2
    settings = TimingSettings(args.warmup_ms, args.rep_ms)
    if args.device == "cuda":
        timer, timing = gpu_timer(settings)
    else:
        timer, timing = wallclock_timer(), "CPU wall clock: a smoke test, not a measurement"
        print(f"cubridge bench: --device cpu times with the wall clock; {timing}")
    config = BenchConfig(seq_lens=args.seq_lens, configs=args.configs, tokens=args.tokens,
                         seed=args.seed, device=args.device, rounds=args.rounds)
    timing = f"{timing}, warmup {settings.warmup_ms} ms, rep {settings.rep_ms} ms"
    if args.rounds > 1:
        timing += f"; {args.rounds} interleaved rounds per case, each implementation's median"
    meta = collect_metadata(invocation(sys.argv), args.device, timing,
                            {"impls": {i.name: i.source for i in impls}})
    print(f"cubridge bench on {meta['device']}: {len(specs)} variant(s) x {len(args.configs)} "
          f"config(s) x {len(args.seq_lens)} length(s), impls {[i.name for i in impls]}")
    results = run_bench(specs, impls, config, timer)
    out_dir = args.out_dir / (args.name or default_run_name(meta["device"]))
    paths = write_reports(out_dir, meta, results)
    print()
    print(markdown_table(results))
    print()
    if "summary" in paths:
        print(paths["summary"].read_text())
    print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0
