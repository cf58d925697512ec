"""`cubridge eval`: a folder of specs through the LLM path with any provider, k
samples each: pass@1/3/5 of IR verification, compilation and GPU
verification, replies, tokens, cost and time per stage, and the verified
kernels' time against the source kernel's causal build (cubridge.pipeline.evaluate).

cubridge eval examples/specs --k 5 --llm-provider anthropic --llm-model NAME \
    --llm-api-key-env ANTHROPIC_API_KEY --out runs/eval-NAME
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cubridge.llm import BudgetExceeded, LLMError, add_llm_arguments, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval", help="pass@k of a model on the LLM path over a folder of specs",
        description="Run every spec (files, or the *.py of folders) that takes the LLM path "
        "through it k times (independent samples), and report pass@1/3/5 for IR "
        "verification, compilation and GPU verification (not run without a GPU), replies, "
        "tokens, cost and time per stage, and the verified kernels' time against the source "
        "kernel's own causal build. Writes eval.json, eval.md and eval.png. Specs the hook "
        "rules serve are listed and skipped.")
    p.add_argument("specs", type=Path, nargs="+", help="spec files or folders of them")
    p.add_argument("--k", type=int, default=5, help="samples per spec (default 5)")
    p.add_argument("--rounds", type=int, default=4,
                   help="replies per sample and stage, feedback included (default 4)")
    p.add_argument("--temperature", type=float, help="sampling temperature")
    p.add_argument("--arch", default="sm_90a", help="compile for this arch (default sm_90a)")
    p.add_argument("--kernel", help="library kernel (default: selected per spec for --arch)")
    p.add_argument("--seed", type=int, help="seed of the verifiers' random inputs")
    p.add_argument("--out", type=Path, default=Path("runs") / "eval",
                   help="output folder (default runs/eval)")
    add_llm_arguments(p)
    p.set_defaults(func=eval_command)


def eval_command(args: argparse.Namespace) -> int:
    from cubridge.llm_path.settings import StageSettings
    from cubridge.pipeline.evaluate import EvalSettings, evaluate

    if args.k < 1 or args.rounds < 1:
        print("cubridge eval: --k and --rounds must be at least 1", file=sys.stderr)
        return 2
    settings = EvalSettings(k=args.k, rounds=args.rounds, temperature=args.temperature,
                            arch=args.arch, kernel=args.kernel,
                            stage=StageSettings(rounds=args.rounds, seed=args.seed))
    try:
        results = evaluate(args.specs, args.out, settings, config_from_args(args),
                           log=lambda line: print(line, file=sys.stderr))
    except BudgetExceeded as exc:
        print(f"cubridge eval: budget exhausted: {exc}; rerun to resume from the cached "
              "exchanges", file=sys.stderr)
        return 4
    except (LLMError, FileNotFoundError, ValueError) as exc:
        print(f"cubridge eval: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print((args.out / "eval.md").read_text())
    print(f"{args.out / 'eval.json'}, {args.out / 'eval.md'}, {args.out / 'eval.png'} "
          f"({sum(1 for r in results if r.skipped is None)} spec(s) evaluated)")
    return 0
