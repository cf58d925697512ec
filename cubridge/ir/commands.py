"""`cubridge ir ...`: show, diff and check CuIR programs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from cubridge.ir.structure import diff_kernels, pick_kernel, show


def register(subparsers: argparse._SubParsersAction) -> None:
    ir = subparsers.add_parser("ir", help="inspect CuIR programs (show, diff, check)")
    sub = ir.add_subparsers(dest="ir_command", metavar="IR_COMMAND")

    p = sub.add_parser("show", help="outline a CuIR kernel: roles, hooks, synchronisation")
    p.add_argument("file", help="Python file defining a KernelBase subclass")
    p.add_argument("--class", dest="cls", help="kernel class, when the file has several")
    p.set_defaults(func=_show)

    p = sub.add_parser("diff", help="structural diff of two CuIR kernels; says whether the "
                       "change stays inside hooks (exit 0: identical, 1: different)")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--class-a", dest="cls_a")
    p.add_argument("--class-b", dest="cls_b")
    p.set_defaults(func=_diff)

    p = sub.add_parser("check", help="static checks of a CuIR kernel for a target")
    p.add_argument("file")
    p.add_argument("--class", dest="cls")
    p.add_argument("--arch", choices=["sm80", "sm90"], help="default: the kernel's own")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--spec", help="spec whose make_aux makes the aux tensors the kernel reads "
                   "(default: spec.py beside FILE, as in a run directory)")
    p.set_defaults(func=_check)
    ir.set_defaults(func=lambda args: ir.print_help() or 0)


def _show(args: argparse.Namespace) -> int:
    try:
        print(show(pick_kernel(args.file, args.cls)))
    except ValueError as e:
        print(f"cubridge ir show: {e}", file=sys.stderr)
        return 2
    return 0


def _diff(args: argparse.Namespace) -> int:
    try:
        d = diff_kernels(pick_kernel(args.a, args.cls_a), pick_kernel(args.b, args.cls_b))
    except ValueError as e:
        print(f"cubridge ir diff: {e}", file=sys.stderr)
        return 2
    print(d)
    return 0 if d.identical else 1


def _check(args: argparse.Namespace) -> int:
    from cubridge.ir.checks import check
    from cubridge.ir.errors import CuIRError
    from cubridge.spec import SpecError

    try:
        kernel = pick_kernel(args.file, args.cls)
        aux = _spec_aux(kernel, args.file, args.spec)
    except (ValueError, SpecError) as e:
        print(f"cubridge ir check: {e}", file=sys.stderr)
        return 2
    try:
        report = check(kernel, args.arch, head_dim=args.head_dim, aux=aux)
    except (ValueError, CuIRError) as e:
        print(f"cubridge ir check: {e}", file=sys.stderr)
        return 1
    print(report)
    return 0


def _spec_aux(kernel: type, file: str, spec_file: str | None):  # noqa: ANN202
    """For a kernel that reads aux tensors: a maker of them from the spec
    (--spec, else the spec.py of the run directory holding FILE)."""
    from cubridge.attention import Shape
    from cubridge.spec import load, make_aux

    names = list(getattr(kernel, "aux_names", ()) or ())
    if not names:
        return None
    if spec_file is None:
        beside = Path(file).parent / "spec.py"
        if not beside.is_file():
            raise ValueError(f"{kernel.__name__} reads aux tensors {names}: pass --spec FILE "
                             "(the spec.py beside a run directory's target_cuir.py is used "
                             "when present)")
        spec_file = str(beside)
    spec = load(spec_file)

    def maker(b: int, hq: int, hk: int, sq: int, sk: int, d: int) -> dict:
        return make_aux(spec, Shape(b, hq, hk, sq, sk, d), torch.Generator().manual_seed(0))

    return maker
