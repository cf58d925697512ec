"""What fa_sm90's tiles visit under each benchmark variant's mask, counted on the
CPU from the spec's mask_mod (no GPU): per query tile (block_m rows, consumers of
64 rows) the key blocks visited, those masked for some consumer (PARTIAL), those
one consumer's rows do not reach while the other's do (its products run on
all-masked scores), those whose keys one consumer's rows reach in one 64-key half
only, the share of the computed pairs the mask allows, and the share of the tensor
work products on the reached halves alone would save. These bound the masked
variants' speed against causal's (NOTES.md, per-tile cost).

    python bench/kernels/fa_sm90/block_stats.py causal sliding_window_1024 --s 4096
"""

from __future__ import annotations

import argparse

import torch

from cubridge.attention import Shape
from cubridge.bench.commands import load_specs
from cubridge.spec import bind_mods, dense_mask

ROWS_PER_CONSUMER = 64


def block_stats(spec, s: int, block_m: int = 128, block_n: int = 128, seed: int = 0) -> dict:
    """Counts per query tile for one (batch 0, head 0) mask of spec at Sq = Sk = s."""
    aux = spec.make_aux(Shape(1, 1, 1, s, s, 128), torch.Generator().manual_seed(seed), "cpu") \
        if spec.make_aux else {}
    allowed = dense_mask(bind_mods(spec, aux), 1, 1, s, s)[0, 0]  # (all pairs without a mask)
    consumers, tiles, blocks = block_m // ROWS_PER_CONSUMER, s // block_m, s // block_n
    by_rows = allowed.reshape(tiles, consumers, ROWS_PER_CONSUMER, blocks, block_n)
    reached = by_rows.any(dim=(2, 4))  # [tile, consumer, key block]
    whole = by_rows.all(dim=(2, 4))
    visited = reached.any(dim=1)
    # halves of a block's keys each consumer's rows reach: [tile, consumer, key block]
    halves = by_rows.reshape(tiles, consumers, ROWS_PER_CONSUMER, blocks, 2, block_n // 2) \
        .any(dim=(2, 5)).sum(dim=-1)
    computed = visited.unsqueeze(1).expand_as(halves)
    one_half = computed & (halves == 1)
    return {
        "visited": visited.sum().item() / tiles,
        "partial": (visited & ~whole.all(dim=1)).sum().item() / tiles,
        "one_consumer_empty": (visited & ~reached.all(dim=1)).sum().item() / tiles,
        "pairs_used": allowed.sum().item() / (visited.sum().item() * block_m * block_n),
        "one_half": one_half.sum().item() / tiles,
        "half_saving": one_half.sum().item() / (2 * computed.sum().item()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--s", type=int, default=4096)
    args = ap.parse_args()
    print(f"S = {args.s}, 128 x 128 tiles, two consumers of 64 rows; per query tile:\n")
    print("| variant | blocks visited | masked (PARTIAL) | one consumer's rows not reached "
          "| allowed share of computed pairs | consumer blocks reaching one half "
          "| tensor work half-width products would save |")
    print("|---|---|---|---|---|---|---|")
    for spec in load_specs(args.variants):
        st = block_stats(spec, args.s)
        print(f"| {spec.name} | {st['visited']:.2f} | {st['partial']:.2f} "
              f"| {st['one_consumer_empty']:.2f} | {st['pairs_used']:.1%} "
              f"| {st['one_half']:.2f} | {st['half_saving']:.1%} |")


if __name__ == "__main__":
    main()
