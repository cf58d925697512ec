"""`cubridge verify SPEC --impl MODULE:FUNC`: verify any importable attention
implementation against a spec and print the table."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cubridge.verify.report import CaseResult

PROGRESS_EVERY_S = 2.0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify", help="verify an attention implementation against a spec",
        description="Differential test of an implementation against a spec on fresh random "
                    "inputs (docs/specs.md, Verification). The implementation is "
                    "impl(q, k, v, scale=None, **aux) -> out | (out, lse).")
    p.add_argument("spec", help="spec file (.py)")
    p.add_argument("--impl", required=True,
                   help="MODULE:FUNC or FILE.py:FUNC; a function marked @impl_factory (such as "
                        "cubridge.verify.peers:flex_impl) or given with --factory is called "
                        "with the spec to make the impl")
    p.add_argument("--factory", action="store_true", help="FUNC(spec) returns the impl")
    p.add_argument("--device", default="cpu", help="device for the impl (cpu, cuda, cuda:1)")
    p.add_argument("--dtype", action="append", dest="dtypes",
                   help="dtype to test (repeatable; default: the spec's DTYPES)")
    p.add_argument("--shape", action="append", dest="shapes", type=_shape,
                   metavar="B,HQ,HK,SQ,SK,D[,DV]",
                   help="problem size to test (repeatable; default: the verifier's sweep)")
    p.add_argument("--trials", type=int, default=1, help="fresh inputs per case (default 1)")
    p.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    p.add_argument("--isolate", action="store_true",
                   help="run the impl in a worker process with a timeout per call")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per call (isolated)")
    p.add_argument("--no-lse", action="store_true", help="accept an impl that returns out only")
    p.add_argument("--json", type=Path, help="also write the report as JSON here")
    p.set_defaults(func=_verify)


def _shape(text: str):
    from cubridge.attention import Shape

    try:
        dims = [int(x) for x in text.split(",")]
        return Shape(*dims)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected B,HQ,HK,SQ,SK,D[,DV] positive ints ({exc})") from exc


class _Progress:
    """A line on stderr every PROGRESS_EVERY_S seconds while cases run (the
    table goes to stdout at the end), so a long run says how far it is."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.failed = 0

    def __call__(self, done: int, total: int, case: CaseResult) -> None:
        self.failed += not case.passed
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S and done < total:
            self.last = now
            print(f"verify: {done}/{total} cases, {self.failed} failed, {now - self.start:.0f}s "
                  f"(last: {case.shape} {case.dtype} {case.distribution})", file=sys.stderr,
                  flush=True)


def _verify(args: argparse.Namespace) -> int:
    from cubridge.spec import SpecError, load
    from cubridge.verify import verify
    from cubridge.verify.candidate import impl_factory, import_impl, parse_impl_file

    try:
        spec = load(args.spec)
    except SpecError as exc:
        print(f"spec error: {exc}", file=sys.stderr)
        return 2
    impl: object = args.impl
    if args.isolate and args.impl.rpartition(":")[0].endswith(".py"):
        try:  # not run here (it runs isolated), but a file that does not parse is exit 2
            parse_impl_file(args.impl)
        except ValueError as exc:
            print(f"impl error: {exc}", file=sys.stderr)
            return 2
    if args.factory or not args.isolate:
        try:
            fn = import_impl(args.impl)
        except (ValueError, ImportError) as exc:
            print(f"impl error: {exc}", file=sys.stderr)
            return 2
        if args.factory and not args.isolate:
            impl = impl_factory(fn)
        elif args.factory:
            print("impl error: --factory with --isolate: mark FUNC with "
                  "cubridge.verify.impl_factory instead", file=sys.stderr)
            return 2
    try:
        report = verify(spec, impl, device=args.device, dtypes=args.dtypes, shapes=args.shapes,
                        trials=args.trials,
                        seed=args.seed, isolate=args.isolate, timeout_s=args.timeout,
                        require_lse=not args.no_lse, progress=_Progress())
    except SpecError as exc:
        print(f"spec error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.table())
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=1, default=str))
    return 0 if report.passed else 1
