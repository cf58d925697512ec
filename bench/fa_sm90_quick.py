"""Quick timing of fa_sm90 against SDPA on the BENCHMARK.md workload (bf16,
16k tokens per batch), outputs checked first. Development aid; the recorded
comparison with every peer is `cubridge bench`.

    python bench/fa_sm90_quick.py [--d 128] [--s 1024 2048 4096 8192]"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from cubridge.kernels import fa_sm90


def tflops(b, hq, s, d, ms, causal):
    pairs = s * (s + 1) / 2 if causal else s * s
    return 4 * b * hq * pairs * d / (ms * 1e-3) / 1e12


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[128])
    ap.add_argument("--s", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--heads", default="32/32")
    args = ap.parse_args()
    hq, hk = (int(x) for x in args.heads.split("/"))
    print(f"{'D':>4} {'S':>6} {'mode':>7} {'fa_sm90':>9} {'sdpa':>9} {'err':>9}")
    for d in args.d:
        for s in args.s:
            b = 16384 // s
            q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, hk, s, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, hk, s, d, device="cuda", dtype=torch.bfloat16)
            for causal in (False, True):
                ours = lambda: fa_sm90.attention(q, k, v, causal=causal)[0]
                sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                              enable_gqa=hq != hk)
                err = ((ours().float() - sdpa().float()).norm() / sdpa().float().norm()).item()
                t_ours = do_bench(ours, warmup=50, rep=300, return_mode="median")
                t_sdpa = do_bench(sdpa, warmup=50, rep=300, return_mode="median")
                mode = "causal" if causal else "full"
                print(f"{d:>4} {s:>6} {mode:>7} {tflops(b, hq, s, d, t_ours, causal):9.1f} "
                      f"{tflops(b, hq, s, d, t_sdpa, causal):9.1f} {err:9.2e}", flush=True)


if __name__ == "__main__":
    main()
