"""Where a `cubridge run` kernel loses to the library call of the same kernel:
times, in one process on the same inputs, (a) the library's causal build, (b) the
library entry with the generated causal hooks header, (c) the compiled variant
of examples/specs/causal.py (what `cubridge bench --ours runs` times), and the
host time per call of each (a tiny problem, so the GPU never limits).

    python bench/kernels/fa_sm90/path_overhead.py [--spec examples/specs/causal.py] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from triton.testing import do_bench

import cubridge
from cubridge.bench.flops import band_pairs  # causal: 0 <= q - k
from cubridge.kernels import get_kernel


def host_us(fn, calls: int = 300) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="examples/specs/causal.py")
    ap.add_argument("--out")
    args = ap.parse_args()
    fa = get_kernel("fa_sm90")
    variant = cubridge.compile(args.spec, kernel="fa_sm90")
    header = variant.hooks_header
    rows = []
    for b, h, s in ((4, 32, 4096), (1, 1, 128)):
        q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        qkv = (q, k, v)
        calls = {
            "library causal": lambda qkv=qkv: fa.attention(*qkv, causal=True),
            "library + generated header": lambda qkv=qkv: fa.attention(*qkv, hooks_header=header),
            "compiled variant": lambda qkv=qkv: variant(*qkv),
        }
        ref = calls["library causal"]()[0]
        for name, fn in calls.items():
            err = (fn()[0].float() - ref.float()).abs().max().item()
            row = {"case": f"B{b} H{h} S{s}", "impl": name, "max_abs_diff_vs_library": err}
            if s > 128:
                ms = do_bench(fn, warmup=25, rep=200)
                row["ms"] = ms
                row["tflops"] = 4 * b * h * band_pairs(s, s, 0, s) * 128 / (ms * 1e-3) / 1e12
            else:
                row["host_us_per_call"] = host_us(fn)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
