"""Issue 5's sparsity/hook-cost check, computed from bench results (never retyped):
each variant's TFLOP/s on allowed pairs as a fraction of the same kernel's causal
TFLOP/s, at the same head config and S, in the same run.

    python bench/vs_causal.py bench/results/h100-variants-s4096/results.json \
        [more results.json with the same device...] [--impl fa4] > .../vs_causal.md

`--impl NAME` takes a peer's own causal as its reference instead (fa4, flex_flash, ...):
how far a peer's masked variants fall from its own causal, beside ours.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cubridge.bench.report import load_json

IMPLS = ("ours", "cubridge")  # `cubridge bench` and `cubridge run` names
# docs/benchmark.md variants with a bar: 85% of causal, 70% for softcap and sigmoid.
LOOSER = {"softcap_causal": 0.70, "sigmoid_causal": 0.70, "comb_prefix_softcap_sigmoid": 0.70}
NO_BAR = {"full", "causal"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results.json files of `cubridge bench`")
    ap.add_argument("--impl", help="a peer's name: its variants against its own causal "
                                   "(default: ours)")
    args = ap.parse_args(argv)
    paths = args.results
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        ap.error(f"no such results file: {missing[0]}")
    impls = (args.impl,) if args.impl else IMPLS
    column = args.impl or "ours"
    metas = [load_json(Path(p))[0] for p in paths]
    # Ratios only within one run: keys carry the file they came from.
    tflops = {}
    for i, p in enumerate(paths):
        for case in load_json(Path(p))[1]:
            for r in case.impls:
                if r.impl in impls and r.status == "ok":
                    tflops[(case.variant, case.config, case.seq_len, i)] = r.tflops
    if not tflops:
        ap.error(f"no verified {column} results in {', '.join(paths)}")
    what = "" if args.impl is None else f" ({args.impl} against its own causal)"
    print(f"# Hook-variant cost: TFLOP/s on allowed pairs relative to causal{what}\n")
    for p, meta in zip(paths, metas, strict=True):
        print(f"- `{p}`: {meta['device']}, {meta['date']}, commit {meta['commit']}, "
              f"command `{meta['command']}`")
    print(f"\n| variant | config | S | {column} | causal | ratio | bar | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for (variant, config, s, i), t in sorted(tflops.items()):
        causal = tflops.get(("causal", config, s, i))
        if variant in NO_BAR:
            continue
        if causal is None:
            print(f"| {variant} | {config} | {s} | {t:.0f} | - | - | - | no causal in the "
                  "same run |")
            continue
        bar = LOOSER.get(variant, 0.85)
        ratio = t / causal
        verdict = "met" if ratio >= bar else "NOT met"
        print(f"| {variant} | {config} | {s} | {t:.0f} | {causal:.0f} | {ratio:.0%} | "
              f"{bar:.0%} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
