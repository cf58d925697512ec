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
    p.add_argument("kernel", nargs="?", default="fa_sm80", help="library kernel (default fa_sm80)")
    p.add_argument("--arch", action="append", help="target, e.g. sm_90a (repeatable)")
    p.add_argument("--head-dim", type=int, action="append", help="head dim (repeatable)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), action="append", help="repeatable")
    p.add_argument("--causal", choices=["no", "yes", "both"], default="both",
                   help="default hooks' causal mode (ignored with --hooks)")
    p.add_argument("--hooks", type=Path, help="a generated cubridge_hooks.cuh to build with")
    p.set_defaults(func=_build)
    k = subparsers.add_parser("kernels", help="list the expert kernel library")
    k.set_defaults(func=_kernels)


def _build(args: argparse.Namespace) -> int:
    import torch

    from cubridge.build.errors import BuildPartError
    from cubridge.kernels import load_metadata

    if args.kernel != "fa_sm80":
        print(f"cubridge build: no build recipe for kernel {args.kernel!r} (have: fa_sm80)",
              file=sys.stderr)
        return 2
    from cubridge.kernels import fa_sm80

    meta = load_metadata(args.kernel)
    hooks = args.hooks.read_text() if args.hooks else None
    archs = args.arch or list(meta.compile_only_archs)
    head_dims = args.head_dim or list(meta.head_dims)
    dtypes = [getattr(torch, _DTYPES[d]) for d in args.dtype] if args.dtype else list(meta.dtypes)
    modes = [False] if hooks else {"no": [False], "yes": [True], "both": [False, True]}[
        args.causal]
    print(f"{'arch':7} {'D':>4} {'dtype':9} {'causal':6} {'regs':>4} {'stack':>5} "
          f"{'spill st/ld':>11}  cached  cubin")
    spilled = 0
    for arch in archs:
        for d in head_dims:
            for dtype in dtypes:
                for causal in modes:
                    try:
                        c = fa_sm80.compile_for(d, dtype, arch, causal=causal, hooks_header=hooks)
                    except (BuildPartError, ValueError, TypeError) as exc:
                        print(f"cubridge build: {exc}", file=sys.stderr)
                        return 1
                    r = c.resources_of(meta.entry)
                    spilled += r.spills
                    spill = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
                    print(f"{arch:7} {d:>4} {str(dtype)[6:]:9} {str(causal):6} {r.registers:>4} "
                          f"{r.stack_frame_bytes:>5} {spill:>11}  "
                          f"{'yes' if c.from_cache else 'no':6}  {c.cubin_path}")
    if spilled:
        print(f"{spilled} build(s) spill registers", file=sys.stderr)
    return 1 if spilled else 0


def _kernels(args: argparse.Namespace) -> int:
    from cubridge.kernels import list_kernels, load_metadata

    for name in list_kernels():
        m = load_metadata(name)
        configs = ", ".join(f"D{d}: {c.block_m}x{c.block_n}, {c.num_warps} warps, "
                            f"{c.stages} stages" for d, c in sorted(m.configs.items()))
        print(f"{name}: {m.description}")
        print(f"  archs {', '.join(m.archs)} (min {m.min_arch}); head dims "
              f"{', '.join(map(str, m.head_dims))}; dtypes "
              f"{', '.join(str(t)[6:] for t in m.dtypes)}")
        print(f"  tiles {configs}; source {m.source}")
    return 0
