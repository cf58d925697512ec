"""`cubridge hooks SPEC`: the deterministic hook path of one spec, inspectable.

Writes into --out: cubridge_hooks.cuh (the CUDA hook header), aux_manifest.json
(which AuxArgs slot holds which tensor) and target_cuir.py (the hook-only
target CuIR); with --verify, checks the target with the CuIR executor first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "hooks", help="generate a spec's CUDA hook header and hook-only target CuIR",
        description="Trace SPEC's mask_mod/score_mod and normaliser, then write the CUDA "
                    "hook header (docs/hooks.md), its aux manifest and the target CuIR "
                    "(a subclass of the kernel's CuIR overriding hooks only) into --out.")
    p.add_argument("spec", help="spec file (.py)")
    p.add_argument("--out", default=None, help="output directory (default: hooks-<spec name>)")
    p.add_argument("--verify", action="store_true",
                   help="verify the target CuIR against the spec with the executor (CPU)")
    p.add_argument("--print", dest="show", action="store_true", help="also print the header")
    p.add_argument("--kernel", help="library kernel (default: selected for the spec)")
    p.add_argument("--arch", help="target arch for the kernel selection (default sm_90a)")
    p.set_defaults(func=_hooks)


def _hooks(args: argparse.Namespace) -> int:
    from cubridge.kernels import select_for_spec
    from cubridge.lower.hook_header import generate_header
    from cubridge.spec import SpecError, load
    from cubridge.transfer.hooks import plan_hooks
    from cubridge.transfer.rules import NotHookConfined, transfer_by_rules
    from cubridge.transfer.target import write_target
    from cubridge.transfer.trace import TraceError

    start = time.perf_counter()
    try:
        spec = load(args.spec)
        kernel = select_for_spec(spec, args.arch or "sm_90a", args.kernel)
        first = spec.configs[0]
        plan = plan_hooks(spec, table_block=kernel.table_block(first.d, first.dv))
    except (SpecError, TraceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out or f"hooks-{spec.name}")
    out.mkdir(parents=True, exist_ok=True)
    header = generate_header(plan)
    (out / "cubridge_hooks.cuh").write_text(header.text)
    (out / "aux_manifest.json").write_text(json.dumps(header.manifest(), indent=1) + "\n")
    if args.verify:
        try:
            result = transfer_by_rules(spec, kernel.cuir_class(), out_dir=out, plan=plan,
                                       config=kernel.cuir_config(first.d, first.dv))
        except NotHookConfined as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(result.summary())
    else:
        write_target(plan, kernel.cuir_class(), out / "target_cuir.py")
    hooks = [n for n, on in (("score_mod", plan.score), ("mask_mod", plan.mask)) if on]
    print(f"hooks: {spec.name} on {kernel.name}: {', '.join(hooks) or 'no mods'}, "
          f"{plan.normalizer}, blocks by {plan.classification}, mask bits by "
          f"{header.mask_form(kernel.source.read_text())}, {len(header.slots)} aux "
          f"slot(s) -> {out}/cubridge_hooks.cuh, aux_manifest.json, target_cuir.py "
          f"({time.perf_counter() - start:.1f}s)")
    if args.show:
        print(header.text)
    return 0
