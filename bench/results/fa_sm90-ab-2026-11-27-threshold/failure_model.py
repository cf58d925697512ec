"""How often a steady block's test on the sums of P fails, on the CPU: fa_sm90's walk of
one causal tile (diagonal block first, then key blocks downwards), its warps of 16 rows,
each thread's partial row sums over its 32 columns (8j + 2t + {0, 1}), and the threshold
rule where the test fails. Normal q, k (D = 128), as the bench's inputs; S = 4096.

    python bench/results/fa_sm90-ab-2026-11-27-threshold/failure_model.py
"""
import torch

D, S, BM, BN = 128, 4096, 128, 128
LOG2E = 1.4426950408889634


def failures(threshold: float, causal: bool, tiles: int, seed: int = 0) -> tuple[int, int]:
    gen = torch.Generator().manual_seed(seed)
    failed = total = 0
    for t in range(tiles):
        m0 = (S // BM - 1 - t) * BM  # the schedule's longest tiles first
        q = torch.randn(BM, D, generator=gen)
        k = torch.randn(m0 + BM, D, generator=gen)
        s = q @ k.T / D ** 0.5 * LOG2E  # log2 units
        if causal:
            qi = torch.arange(m0, m0 + BM)[:, None]
            s = s.masked_fill(torch.arange(m0 + BM)[None, :] > qi, float("-inf"))
        order = list(range((m0 + BM) // BN - 1, -1, -1))
        row_max = s[:, order[0] * BN:(order[0] + 1) * BN].max(1).values
        for n in order[1:]:
            block = s[:, n * BN:(n + 1) * BN]
            partial = torch.exp2(block - row_max[:, None]).reshape(BM, 16, 4, 2).sum(dim=(1, 3))
            warp_ok = (partial <= 2 ** threshold).all(1).reshape(BM // 16, 16).all(1)
            failed += int((~warp_ok).sum())
            total += BM // 16
            # a failed warp runs online_softmax: the max moves where it rose past the threshold
            rise = block.max(1).values - row_max
            moves = (~warp_ok).repeat_interleave(16) & (rise > threshold)
            row_max = torch.where(moves, block.max(1).values, row_max)
    return failed, total


if __name__ == "__main__":
    for threshold in (8, 10, 12, 15):
        f, n = failures(threshold, True, 32)
        print(f"threshold {threshold}: causal, {f} of {n} warp-blocks fail ({100 * f / n:.2f}%)")
