"""`cubridge spec check FILE`: load a spec, run it on small shapes, summarise."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    spec = subparsers.add_parser("spec", help="work with spec files (docs/specs.md)")
    spec_sub = spec.add_subparsers(dest="spec_command", metavar="SUBCOMMAND")
    check = spec_sub.add_parser(
        "check", help="load a spec, run its reference on small shapes, check its mods",
        description="Load FILE, run its reference (float64 and each spec dtype) on the "
                    "verifier's small shapes, check make_aux and the mods against the "
                    "reference, and print a summary. Exit status 1 on a bad spec.")
    check.add_argument("file", help="spec file (.py)")
    check.add_argument("--seed", type=int, default=0, help="seed of the check inputs")
    check.set_defaults(func=_check)
    spec.set_defaults(func=lambda args: spec.print_help() or 0)


def _check(args: argparse.Namespace) -> int:
    from cubridge.spec import SpecError, check_spec, load

    try:
        summary = check_spec(load(args.file), seed=args.seed)
    except SpecError as exc:
        print(f"spec error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary.lines()))
    return 0
