"""document_causal with tiles aligned to each document's start (a varlen-style
schedule: query tiles and key blocks of 128 from every document's first token,
no block shared by two documents) against the fixed 128 grid, by the counts of
block_stats.py: ratio to causal in TFLOP/s on allowed pairs at b blocks of fixed
cost per tile. Same masks (the spec's make_aux, seeds 0-7, one sequence each).

    python bench/results/fa_sm90-bar-bounds-2026-11-28/doc_aligned.py --s 4096
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench/kernels/fa_sm90"))
from block_stats import block_stats  # noqa: E402

from cubridge.attention import Shape  # noqa: E402
from cubridge.bench.commands import load_specs  # noqa: E402


def doc_lengths(spec, s: int, seed: int) -> list[int]:
    aux = spec.make_aux(Shape(1, 1, 1, s, s, 128), torch.Generator().manual_seed(seed), "cpu")
    return torch.unique_consecutive(aux["q_doc"][0], return_counts=True)[1].tolist()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    specs = load_specs(["causal", "document_causal"])
    causal, doc = specs
    s, blk, n = args.s, 128, args.seeds
    c = block_stats(causal, s)
    grid = [block_stats(doc, s, seed=i) for i in range(n)]
    lens = [doc_lengths(doc, s, i) for i in range(n)]
    tiles = s // blk
    allowed = sum(g["allowed"] for g in grid) / n
    grid_blocks = sum(g["visited"] for g in grid) / n * tiles  # per sequence
    aligned_tiles = sum(math.ceil(L / blk) for ls in lens for L in ls) / n
    aligned_blocks = sum(math.ceil(L / blk) * (math.ceil(L / blk) + 1) // 2
                         for ls in lens for L in ls) / n
    causal_blocks = c["visited"] * tiles
    print(f"S = {s}, {n} masks: allowed {allowed / c['allowed']:.3f} of causal's pairs; "
          f"grid {grid_blocks:.1f} blocks / {tiles} tiles, document-aligned "
          f"{aligned_blocks:.1f} blocks / {aligned_tiles:.1f} tiles (causal {causal_blocks:.0f} "
          f"/ {tiles})\n")
    print("| b (blocks a tile) | grid | document-aligned |")
    print("|---|---|---|")
    for b in (0.0, 0.5, 1.0, 1.5):
        base = allowed / c["allowed"] * (causal_blocks + b * tiles)
        print(f"| {b} | {base / (grid_blocks + b * tiles):.3f} | "
              f"{base / (aligned_blocks + b * aligned_tiles):.3f} |")


if __name__ == "__main__":
    main()
