"""`cubridge run SPEC` (the main command) and `cubridge transfer --spec SPEC`
(its transfer alone: rules first, else the LLM); cubridge.pipeline.run does
the work. The modules they run are imported when a command runs, so that
`cubridge --help` starts fast."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cubridge.llm.config import add_llm_arguments, config_from_args
from cubridge.llm_path.commands import add_stage_command_arguments
from cubridge.llm_path.settings import add_stage_arguments


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from exc


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="spec -> verified, benchmarked CUDA kernel (transfer, lower, compile...)",
        description="Load SPEC, check it (`cubridge spec check`: a bad spec is blamed at "
        "its own line), transfer the library kernel's CuIR to it (hook rules, else the LLM "
        "path: --llm-*), verify the target CuIR on the CPU, generate the CUDA hooks, compile, "
        "verify on the GPU and benchmark against the peers. Artifacts go to the run "
        "directory; unchanged stages are reused, so a repeated run is nearly instant.")
    p.add_argument("spec", type=Path, help="the spec file (see docs/specs.md)")
    p.add_argument("--kernel", help="library kernel (default: the one `cubridge kernels` "
                   "selects for this GPU and the spec)")
    p.add_argument("--out", type=Path, help="run directory (default runs/<spec>-<hash>)")
    p.add_argument("--arch", help="compile for this arch (default: the GPU's, else sm_90a)")
    p.add_argument("--no-bench", action="store_true", help="stop after GPU verification")
    p.add_argument("--seq-lens", type=_ints, default=[1024, 2048, 4096, 8192],
                   help="benchmark sequence lengths (default 1024,2048,4096,8192)")
    p.add_argument("--configs", type=_names, help="benchmark head configs (default: the spec's)")
    p.add_argument("--peers", type=_names, help="peers to benchmark (default: all)")
    p.add_argument("--seed", type=int, help="seed of the verifiers' random inputs")
    # The LLM path's loop (--rounds, --k, --temperature...), provider, model, budgets.
    add_stage_arguments(p, seed=False)
    add_llm_arguments(p)
    p.set_defaults(func=run_command)

    t = subparsers.add_parser(
        "transfer", help="the target CuIR of a spec: deterministic hook rules, else the LLM",
        description="Transfer a library kernel's CuIR to SPEC and verify the target with the "
        "executor, by the deterministic hook rules when the variant's change stays inside the "
        "hooks and by the LLM otherwise (the routing of `cubridge run`). The run directory is "
        "the one `cubridge run` uses, so a later run resumes from it.")
    t.add_argument("--spec", type=Path, required=True, help="the user's spec file")
    t.add_argument("--kernel", "--from", dest="kernel",
                   help="library kernel (default: selected for this GPU and the spec)")
    add_stage_command_arguments(t, transfer_command)


def run_command(args: argparse.Namespace) -> int:
    from cubridge.llm import LLMError
    from cubridge.llm.config import FLAG_HELP
    from cubridge.llm_path.settings import settings_from_args
    from cubridge.pipeline.run import RunOptions, VerificationFailed, run
    from cubridge.spec import SpecError

    try:  # flags over environment over config file; without flags the LLM path reads the rest
        given = any(getattr(args, f"llm_{k}", None) is not None for k in FLAG_HELP)
        llm_config = config_from_args(args) if given or args.llm_config else None
        llm_settings = settings_from_args(args)
    except (LLMError, ValueError) as exc:
        print(f"cubridge run: {exc}", file=sys.stderr)
        return 2
    opts = RunOptions(kernel=args.kernel or None, out=args.out, arch=args.arch,
                      bench=not args.no_bench, bench_seq_lens=args.seq_lens,
                      bench_configs=args.configs, bench_peers=args.peers, seed=args.seed,
                      llm_config=llm_config, llm_settings=llm_settings)
    try:
        result = run(args.spec, opts)
    except (SpecError, VerificationFailed, FileNotFoundError, ValueError) as exc:
        print(f"cubridge run: {exc}", file=sys.stderr)
        return 1
    print(f"run directory: {result.run_dir} (report.md)")
    return 0 if not result.stopped else 3


def transfer_command(args: argparse.Namespace) -> int:
    from cubridge.llm_path.settings import settings_from_args
    from cubridge.pipeline.run import RunOptions, VerificationFailed, transfer_only
    from cubridge.spec import SpecError

    opts = RunOptions(kernel=args.kernel or None, out=args.out,
                      llm_config=config_from_args(args), llm_settings=settings_from_args(args))
    try:
        target = transfer_only(args.spec, opts)
    except (SpecError, VerificationFailed) as exc:
        print(f"cubridge transfer: {exc}", file=sys.stderr)
        return 1
    print(f"{target} (run directory {target.parent})")
    return 0
