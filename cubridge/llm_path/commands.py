"""`cubridge lift | lower`: the LLM-driven stages by hand (`cubridge transfer`,
which tries the rules first, is a pipeline command using the same options).

cubridge lift KERNEL.cu [--spec SPEC]                 expert CUDA -> CuIR + correspondence
cubridge lower TARGET_IR [--from KERNEL] [--spec SPEC]  target CuIR -> edited, compiled CUDA

Every exchange is saved under RUN/llm/<stage>/; rerunning the same command
answers from the cache (no calls) and resumes an interrupted run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from cubridge.llm import BudgetExceeded, LLMClient, LLMError, add_llm_arguments, config_from_args
from cubridge.llm_path.settings import StageFailed, add_stage_arguments, settings_from_args
from cubridge.rundir import RunDir, content_hash


def register(subparsers: argparse._SubParsersAction) -> None:
    lift = subparsers.add_parser(
        "lift", help="LLM: lift an expert CUDA kernel into CuIR (with IR<->CUDA correspondence)")
    lift.add_argument("kernel", type=Path, help="the CUDA source (.cu)")
    lift.add_argument("--spec", type=Path,
                      help="spec of what the kernel computes (default: spec.py beside it)")
    add_stage_command_arguments(lift, _lift)

    lower = subparsers.add_parser(
        "lower", help="LLM: edit the library CUDA where the IR diff says, compile, verify")
    lower.add_argument("target", type=Path, help="the target CuIR (e.g. RUN/target_cuir.py)")
    lower.add_argument("--from", "--kernel", dest="kernel",
                       help="library kernel (default: selected for --arch and the spec)")
    lower.add_argument("--spec", type=Path,
                       help="the user's spec (default: spec.py beside TARGET)")
    lower.add_argument("--correspondence", type=Path,
                       help="correspondence.json of a lift of the kernel (IR method -> CUDA lines)")
    lower.add_argument("--arch", default="sm_90a", help="compile for this arch (default sm_90a)")
    add_stage_command_arguments(lower, _lower)


def add_stage_command_arguments(parser: argparse.ArgumentParser,
                                func: Callable[[argparse.Namespace], int]) -> None:
    """--out, the stage settings and the LLM options; `func` runs with the
    LLM path's exit codes (1 no candidate passed, 2 bad input or provider, 4
    budget exhausted)."""
    parser.add_argument("--out", type=Path, help="run directory (default under runs/)")
    add_stage_arguments(parser)
    add_llm_arguments(parser)
    parser.set_defaults(func=lambda args: _guarded(func, args))


def _guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return func(args)
    except BudgetExceeded as exc:
        print(f"cubridge {args.command}: budget exhausted: {exc}\nthe run directory is intact; "
              "rerun the same command (with a larger budget) to resume from the cached "
              "exchanges", file=sys.stderr)
        return 4
    except StageFailed as exc:
        print(f"cubridge {args.command}: {exc}", file=sys.stderr)
        return 1
    except (LLMError, FileNotFoundError, ValueError) as exc:
        print(f"cubridge {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def _run_dir(args: argparse.Namespace, default: str) -> RunDir:
    return RunDir(args.out or Path("runs") / default)


def _client(args: argparse.Namespace, run_dir: RunDir, stage: str) -> LLMClient:
    return LLMClient.from_config(config_from_args(args), run_dir.path, stage)


def _finish(run_dir: RunDir, client: LLMClient, artifact: Path) -> int:
    print(client.summary(), file=sys.stderr)
    print(f"{artifact} (run directory {run_dir.path})")
    return 0


def _lift(args: argparse.Namespace) -> int:
    from cubridge.llm_path.lift import lift

    text = args.kernel.read_text() if args.kernel.is_file() else ""
    run_dir = _run_dir(args, f"lift-{args.kernel.stem}-{content_hash(text)[:8]}")
    client = _client(args, run_dir, "lift")
    result = lift(args.kernel, client, run_dir, settings_from_args(args), spec_path=args.spec)
    return _finish(run_dir, client, result.program)


def _lower(args: argparse.Namespace) -> int:
    from cubridge.kernels import choose_for_spec
    from cubridge.llm_path.lower import lower
    from cubridge.spec.loader import load

    if not args.target.is_file():
        raise FileNotFoundError(f"target CuIR {args.target} does not exist")
    spec = args.spec or args.target.resolve().parent / "spec.py"
    if not Path(spec).is_file():
        raise FileNotFoundError(f"no spec: pass --spec SPEC ({spec} does not exist)")
    correspondence = (json.loads(args.correspondence.read_text())
                      if args.correspondence else None)
    default = args.target.resolve().parent if (
        args.target.resolve().parent / "manifest.json").is_file() else None
    run_dir = RunDir(args.out or default or Path("runs") / (
        f"lower-{args.target.stem}-{content_hash(args.target.read_text())[:8]}"))
    client = _client(args, run_dir, "lower")
    selection = choose_for_spec(load(spec), args.arch, args.kernel or None, "--arch")
    print(f"[select] {selection}", file=sys.stderr)
    kernel = selection.kernel
    result = lower(args.target, client, run_dir, Path(spec), settings_from_args(args),
                   kernel=kernel, arch=args.arch, correspondence=correspondence)
    return _finish(run_dir, client, result.source)
