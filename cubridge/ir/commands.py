"""`cubridge ir ...`: show, diff and check CuIR programs."""

from __future__ import annotations

import argparse
import sys

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

    try:
        report = check(pick_kernel(args.file, args.cls), args.arch, head_dim=args.head_dim)
    except (ValueError, CuIRError) as e:
        print(f"cubridge ir check: {e}", file=sys.stderr)
        return 1
    print(report)
    return 0
