"""A/B of fa_sm90's schedule sections: each variant (the library's rules path, as
`cubridge run` builds it) runs through the benchmark loop with
launch.SECTION_WAVES set to each of --waves (waves of tiles per section: how many
heads' K/V the CTAs running together share L2 with), interleaved by round, every
output verified before it is timed.

    python bench/kernels/fa_sm90/section_ab.py causal document_causal --waves 1,2,3 \\
        --seq-lens 2048,4096,8192 --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from variant_ab import run_and_report

from cubridge.bench.commands import load_specs
from cubridge.bench.peers import Impl, Prepared
from cubridge.bench.runner import BenchConfig
from cubridge.kernels import get_kernel
from cubridge.kernels.fa_sm90 import launch
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import CompiledVariant, rules_variant


def _impl(name: str, variant: CompiledVariant, waves: int) -> Impl:
    def prepare(case) -> Prepared:  # noqa: ANN001
        q, k, v, aux, scale = case.q, case.k, case.v, case.aux, case.scale

        def run() -> torch.Tensor:
            launch.SECTION_WAVES = waves  # read by every launch's schedule_section
            return variant(q, k, v, scale=scale, **aux)[0]

        return Prepared(run)

    return Impl(name, prepare, f"fa_sm90, sections of {waves} waves")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--waves", default="1,2,3")
    ap.add_argument("--seq-lens", default="4096")
    ap.add_argument("--configs", default="llama2_7b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    lib = get_kernel("fa_sm90")
    waves = [int(w) for w in args.waves.split(",")]
    config = BenchConfig(seq_lens=[int(s) for s in args.seq_lens.split(",")],
                         configs=args.configs.split(","), dtype=torch.bfloat16)
    cases = []
    for spec in load_specs(args.variants):
        route = choose_path(spec, lib)
        if route.plan is None:
            sys.exit(f"{spec.name}: not on the rules path ({route.reason})")
        variant = rules_variant(spec, lib, generate_header(route.plan)).prepare("cuda")
        cases.append((spec, [_impl(f"w{w}#{r + 1}", variant, w)
                             for r in range(args.rounds) for w in waves]))
    run_and_report(cases, config, args.out, "section sizes interleaved by round")


if __name__ == "__main__":
    main()
