"""What staggered tiles visit, counted on the CPU from each spec's mask (batch 0,
head 0, Sq = Sk = 4096): per tile with a live block, the ring positions (key blocks
some consumer's 64 rows reach), those both consumers reach and those one reaches
alone, for the library's tiles (rows [128 m, 128 m + 128)) and for tiles 64 rows
early (rows [128 m - 64, 128 m + 64), one more per head).

    python bench/results/fa_sm90-ab-2026-11-28-stagger/offset_stats.py causal ... > offset_stats.txt
"""

import sys

import torch

from cubridge.attention import Shape
from cubridge.bench.commands import load_specs
from cubridge.spec import bind_mods, dense_mask

ROWS = 64  # a consumer's rows


def stats(spec, s: int, offset: bool) -> dict:
    aux = spec.make_aux(Shape(1, 1, 1, s, s, 128), torch.Generator().manual_seed(0), "cpu") \
        if spec.make_aux else {}
    allowed = dense_mask(bind_mods(spec, aux), 1, 1, s, s)[0, 0]
    if offset:  # rows -64 .. s + 64, the padding reaching no key
        pad = torch.zeros(ROWS, s, dtype=torch.bool)
        allowed = torch.cat([pad, allowed, pad])
    tiles, blocks = allowed.shape[0] // 128, s // 128
    by_rows = allowed[:tiles * 128].reshape(tiles, 2, ROWS, blocks, 128)
    reached = by_rows.any(dim=(2, 4))  # [tile, consumer, key block]
    visited = reached.any(dim=1)
    both = reached.all(dim=1)
    live = visited.any(dim=1).sum().item()
    return {"tiles": live, "positions": visited.sum().item() / live,
            "both": both.sum().item() / live, "alone": (visited & ~both).sum().item() / live}


def main() -> None:
    for spec in load_specs(sys.argv[1:]):
        a, b = stats(spec, 4096, False), stats(spec, 4096, True)
        print(f"{spec.name:28s} library: tiles {a['tiles']} positions {a['positions']:.2f} "
              f"(alone {a['alone']:.2f}) | 64 rows early: tiles {b['tiles']} positions "
              f"{b['positions']:.2f}, both {b['both']:.2f}, alone {b['alone']:.2f}")


if __name__ == "__main__":
    main()
