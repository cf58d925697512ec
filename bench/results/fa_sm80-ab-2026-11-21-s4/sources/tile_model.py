"""Block-grid model of document_causal against causal (B4, S4096, the spec's own
document generator, seed 0): the fraction of computed pairs that are allowed
at several tilings, and the makespan of the CTAs over 264 slots (132 SMs x 2)
for several launch orders, with each CTA costing its key-loop iterations plus
a fixed 1.6 blocks. Run from the repository root:

    python bench/results/fa_sm80-ab-2026-11-21-s4/sources/tile_model.py
"""
import heapq
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "specs")]
import document_causal  # noqa: E402

S, B, H, WARP_ROWS, ALPHA, SLOTS = 4096, 4, 32, 32, 1.6, 264
pos = torch.arange(S)
ids = document_causal.document_ids(S, B, torch.Generator().manual_seed(0))
MASKS = {
    "causal": lambda b: pos[:, None] >= pos[None, :],
    "document": lambda b: (pos[:, None] >= pos[None, :]) & (ids[b][:, None] == ids[b][None, :]),
}


def iterations(allowed, block_m, block_n):
    """Key-loop iterations per CTA: blocks live for any of its 32-row warps."""
    live = allowed.view(S // WARP_ROWS, WARP_ROWS, S // block_n, block_n).any(3).any(1)
    w = block_m // WARP_ROWS
    return [int(live[m * w:(m + 1) * w].any(0).sum()) for m in range(S // block_m)]


def efficiency(name, block_m, block_n):
    pairs = sum(int(MASKS[name](b).sum()) for b in range(B))
    its = sum(sum(iterations(MASKS[name](b), block_m, block_n)) for b in range(B))
    return pairs / (its * block_m * block_n)


def makespan(costs):
    slots = [0.0] * SLOTS
    for c in costs:
        heapq.heappush(slots, heapq.heappop(slots) + c)
    return max(slots) / (sum(costs) / SLOTS)


print("allowed / computed pairs (CTA iterations x tile)")
for bm, bn in [(128, 64), (128, 32), (64, 64), (64, 32), (256, 64)]:
    c, d = efficiency("causal", bm, bn), efficiency("document", bm, bn)
    print(f"  {bm}x{bn}: causal {c:.3f} document {d:.3f} ratio {d / c:.3f}")

print("makespan / ideal (128 x 64)")
for name in MASKS:
    its = [iterations(MASKS[name](b), 128, 64) for b in range(B)]
    heads = [(b, h) for b in range(B) for h in range(H)]
    head_major = [its[b][m] + ALPHA for b, h in heads for m in reversed(range(S // 128))]
    print(f"  {name}: head-major, last query block first {makespan(head_major):.3f}")
    for group in (8, 32):
        order = [its[b][m] + ALPHA for g in range(0, len(heads), group)
                 for m in reversed(range(S // 128)) for b, h in heads[g:g + group]]
        print(f"  {name}: groups of {group} heads, query blocks last-first {makespan(order):.3f}")
    print(f"  {name}: all CTAs longest first {makespan(sorted(head_major, reverse=True)):.3f}")
