"""What fa_sm90's tiles visit under each benchmark variant's mask, counted on the
CPU from the spec's mask_mod (no GPU): per query tile (block_m rows, consumers of
64 rows) the key blocks visited, those masked for some consumer (PARTIAL), those
one consumer's rows do not reach while the other's do (its products run on
all-masked scores), those whose keys one consumer's rows reach in one 64-key half
only, the share of the computed pairs the mask allows, and the share of the tensor
work products on the reached halves alone would save. These bound the masked
variants' speed against causal's (NOTES.md, per-tile cost).

With --bars, each variant's ratio to causal (TFLOP/s on allowed pairs) as the
counts alone give it, were every visited block to cost the same and every tile
b blocks more (fixed cost: Q, the boundary, the epilogue), and the largest b at
which issue 14's bar (cubridge.bench.summary.Targets) is met; documents are
random, so their counts are averaged over seeds.

    python bench/kernels/fa_sm90/block_stats.py causal sliding_window_1024 --s 4096
    python bench/kernels/fa_sm90/block_stats.py --bars sliding_window_1024 document_causal
    python bench/kernels/fa_sm90/block_stats.py --bars document_causal --tile 64x64
"""

from __future__ import annotations

import argparse

import torch

from cubridge.attention import Shape
from cubridge.bench.commands import load_specs
from cubridge.bench.summary import Targets
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
        "allowed": allowed.sum().item(),
        "visited": visited.sum().item() / tiles,
        "partial": (visited & ~whole.all(dim=1)).sum().item() / tiles,
        "one_consumer_empty": (visited & ~reached.all(dim=1)).sum().item() / tiles,
        "pairs_used": allowed.sum().item() / (visited.sum().item() * block_m * block_n),
        "one_half": one_half.sum().item() / tiles,
        "half_saving": one_half.sum().item() / (2 * computed.sum().item()),
    }


def tile_arg(text: str) -> tuple[int, int]:
    """--tile ROWSxKEYS: query rows (a multiple of a consumer's 64) by keys."""
    try:
        block_m, block_n = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ROWSxKEYS, e.g. 64x128") from None
    if block_m <= 0 or block_n <= 0 or block_m % ROWS_PER_CONSUMER:
        raise argparse.ArgumentTypeError(
            f"{text!r}: rows a positive multiple of {ROWS_PER_CONSUMER}, keys positive")
    return block_m, block_n


def ratio_to_causal(variant: dict, causal: dict, tile_cost: float) -> float:
    """TFLOP/s on allowed pairs against causal's, at equal cost per visited block
    and `tile_cost` blocks more per tile (both have s / block_m tiles)."""
    return (variant["allowed"] / causal["allowed"]) * \
        (causal["visited"] + tile_cost) / (variant["visited"] + tile_cost)


def tile_cost_for(variant: dict, causal: dict, bar: float) -> float:
    """The largest per-tile cost (in blocks) at which the ratio reaches `bar`:
    inf where it does at any cost, a negative number where it does at none."""
    r = variant["allowed"] / causal["allowed"]
    if r >= bar:
        return float("inf")
    return (r * causal["visited"] - bar * variant["visited"]) / (bar - r)


def bar_counts(spec, s: int, seeds: int, block_m: int = 128, block_n: int = 128) -> dict:
    """Visited blocks per tile and allowed pairs, averaged over `seeds` masks."""
    runs = [block_stats(spec, s, block_m, block_n, seed=i) for i in range(seeds)]
    return {key: sum(run[key] for run in runs) / seeds for key in ("visited", "allowed")}


def bars_table(variants: list[str], s: int, seeds: int = 8,
               tile_costs: tuple[float, ...] = (0.0, 1.0, 1.5), block_m: int = 128,
               block_n: int = 128) -> str:
    """The bars against per-tile cost, causal counted on the same tiles (b is in
    blocks of those tiles)."""
    targets = Targets()
    causal = bar_counts(load_specs(["causal"])[0], s, 1, block_m, block_n)
    lines = [f"S = {s}, {block_m} x {block_n} tiles; causal visits {causal['visited']:.2f} "
             "blocks a tile. "
             "Ratio to causal at b blocks of fixed cost per tile (equal cost per block), "
             "and the largest b meeting the bar:", "",
             "| variant | blocks visited | allowed pairs / causal's | "
             + " | ".join(f"ratio at b = {b:g}" for b in tile_costs) + " | bar | b for the bar |",
             "|---|---|---|" + "---|" * len(tile_costs) + "---|---|"]
    for spec in load_specs(variants):
        bar = targets.causal_bar(spec.name)
        if bar is None:
            continue
        counts = bar_counts(spec, s, seeds if spec.make_aux else 1, block_m, block_n)
        need = tile_cost_for(counts, causal, bar)
        need_text = "any" if need == float("inf") else "none" if need < 0 else f"<= {need:.2f}"
        lines.append(f"| {spec.name} | {counts['visited']:.2f} | "
                     f"{counts['allowed'] / causal['allowed']:.3f} | "
                     + " | ".join(f"{ratio_to_causal(counts, causal, b):.1%}" for b in tile_costs)
                     + f" | {bar:.0%} | {need_text} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--bars", action="store_true",
                    help="ratios to causal by per-tile cost, and the cost each bar allows")
    ap.add_argument("--seeds", type=int, default=8, help="masks averaged (random aux only)")
    ap.add_argument("--tile", type=tile_arg, default=(128, 128),
                    help="query rows x keys of a tile, e.g. 64x128 (rows a multiple of 64)")
    args = ap.parse_args()
    block_m, block_n = args.tile
    if args.s % block_m or args.s % block_n:
        ap.error(f"--tile {block_m}x{block_n} does not divide S = {args.s}")
    if args.bars:
        print(bars_table(args.variants, args.s, args.seeds, block_m=block_m, block_n=block_n))
        return
    print(f"S = {args.s}, {block_m} x {block_n} tiles, {block_m // ROWS_PER_CONSUMER} "
          f"consumer(s) of {ROWS_PER_CONSUMER} rows; per query tile:\n")
    print("| variant | blocks visited | masked (PARTIAL) | one consumer's rows not reached "
          "| allowed share of computed pairs | consumer blocks reaching one half "
          "| tensor work half-width products would save |")
    print("|---|---|---|---|---|---|---|")
    for spec in load_specs(args.variants):
        st = block_stats(spec, args.s, block_m, block_n)
        print(f"| {spec.name} | {st['visited']:.2f} | {st['partial']:.2f} "
              f"| {st['one_consumer_empty']:.2f} | {st['pairs_used']:.1%} "
              f"| {st['one_half']:.2f} | {st['half_saving']:.1%} |")


if __name__ == "__main__":
    main()
