"""`cubridge build` (compile a library kernel, optionally with a generated hooks
header, and print ptxas's resource report) and `cubridge kernels` (the library)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "build", help="compile a library kernel to a cached cubin; report registers/smem/spills",
        description="Compile a library kernel (default: every head dim, dtype and causal mode "
                    "for its compile-only archs). Exit status 1 if any build spills registers.")
    p.add_argument("kernel", nargs="?",
                   help="library kernel (default: the one selected for the first --arch)")
    p.add_argument("--arch", action="append", help="target, e.g. sm_90a (repeatable)")
    p.add_argument("--head-dim", type=_head_dims, action="append",
                   help="head dim, or QK/V head dims such as 192/128 (repeatable; default: "
                        "every one the entry builds)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), action="append", help="repeatable")
    p.add_argument("--causal", choices=["no", "yes", "both"], default="both",
                   help="default hooks' causal mode (ignored with --hooks)")
    p.add_argument("--hooks", type=Path, help="a generated cubridge_hooks.cuh to build with")
    p.set_defaults(func=_build)
    k = subparsers.add_parser("kernels", help="list the expert kernel library")
    k.set_defaults(func=_kernels)


def _head_dims(text: str) -> tuple[int, int | None]:
    """"128" -> (128, None); "192/128" -> (192, 128)."""
    try:
        d, _, dv = text.partition("/")
        return int(d), (int(dv) if dv else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"head dim {text!r}: an int, or QK/V such as "
                                         "192/128") from None


def _build(args: argparse.Namespace) -> int:
    import torch

    from cubridge.build.errors import BuildPartError
    from cubridge.kernels import select_kernel

    try:
        kernel = select_kernel(args.arch[0] if args.arch else None, kernel=args.kernel)
    except ValueError as exc:
        print(f"cubridge build: {exc}", file=sys.stderr)
        return 2
    meta = kernel.metadata
    hooks = args.hooks.read_text() if args.hooks else None
    archs = args.arch or list(meta.compile_only_archs)
    head_dims = args.head_dim or [*((d, None) for d in meta.head_dims),
                                  *sorted(meta.pair_configs)]
    unbuilt = [f"{d}/{dv}" if dv else str(d) for d, dv in head_dims
               if not meta.supports_dims(d, dv)]
    if unbuilt:
        print(f"cubridge build: {kernel.name} does not build head dims {', '.join(unbuilt)} "
              f"(it builds {meta.dims_text()}); other head dims are an LLM-path edit of its "
              "source (`cubridge run`)", file=sys.stderr)
        return 2
    dtypes = [getattr(torch, _DTYPES[d]) for d in args.dtype] if args.dtype else list(meta.dtypes)
    modes = [False] if hooks else {"no": [False], "yes": [True], "both": [False, True]}[
        args.causal]
    if "causal" not in meta.defines and args.causal == "both":
        modes = [False]  # the entry's default hooks have no causal mode
    print(f"{kernel.name}: {kernel.source}")
    print(f"{'arch':7} {'D':>7} {'dtype':9} {'causal':6} {'regs':>4} {'stack':>5} "
          f"{'spill st/ld':>11}  cached  cubin")
    spilled = 0
    for arch in archs:
        for d, dv in head_dims:
            for dtype in dtypes:
                for causal in modes:
                    try:
                        c = kernel.compile(d, dtype, arch, causal=causal, hooks_header=hooks,
                                           head_dim_v=dv)
                    except (BuildPartError, ValueError, TypeError) as exc:
                        print(f"cubridge build: {exc}", file=sys.stderr)
                        return 1
                    r = c.resources_of(meta.entry)
                    spilled += r.spills
                    spill = f"{r.spill_store_bytes}/{r.spill_load_bytes}" + (
                        f"+{r.callee_spill_bytes}" if r.callee_spill_bytes else "")
                    dims = f"{d}/{dv}" if dv not in (None, d) else str(d)
                    print(f"{arch:7} {dims:>7} {str(dtype)[6:]:9} {str(causal):6} {r.registers:>4} "
                          f"{r.stack_frame_bytes:>5} {spill:>11}  "
                          f"{'yes' if c.from_cache else 'no':6}  {c.cubin_path}")
    if spilled:
        print(f"{spilled} build(s) spill registers", file=sys.stderr)
    return 1 if spilled else 0


def _kernels(args: argparse.Namespace) -> int:
    import dataclasses

    from cubridge.kernels import list_kernels

    for kernel in list_kernels():
        m = kernel.metadata
        tiles = [(f"D{d}", c) for d, c in sorted(m.configs.items())] + [
            (f"D{d}/{dv}", c) for (d, dv), c in sorted(m.pair_configs.items())]
        configs = "; ".join(f"{name}: " + ", ".join(
            f"{f.name} {getattr(c, f.name)}" for f in dataclasses.fields(c)) for name, c in tiles)
        print(f"{kernel.name}: {m.description}")
        print(f"  archs {', '.join(m.archs)} (min {m.min_arch}); head dims "
              f"{m.dims_text()}; dtypes "
              f"{', '.join(str(t)[6:] for t in m.dtypes)}")
        print(f"  tiles {configs}; source {m.source}")
    return 0
