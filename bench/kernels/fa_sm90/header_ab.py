"""Which part of a generated hooks header costs time against the library's own
hooks: the causal spec's generated header is timed whole and with one function
at a time replaced by the library default's closed form (same semantics), in
one process on the same inputs, every output checked against the library build.

    python bench/kernels/fa_sm90/header_ab.py --header runs/causal-*/cubridge_hooks.cuh [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re

import torch
from triton.testing import do_bench

from cubridge.bench.flops import band_pairs  # causal: 0 <= q - k
from cubridge.kernels import get_kernel

CLOSED_FORM = {
    "block_kind": """CUBRIDGE_HD BlockKind block_kind(int b, int h, int q_start, int q_end,
                                 int k_start, int k_end, const AuxArgs& aux) {
  if (k_start > q_end - 1) return BlockKind::Empty;
  if (k_end - 1 <= q_start) return BlockKind::Full;
  return BlockKind::Partial;
}
""",
    "kv_block_range": """CUBRIDGE_HD KvRange kv_block_range(int b, int h, int q_start, int q_end,
                                   int block_n, int num_kv_blocks, const AuxArgs& aux) {
  const int hi = (q_end + block_n - 1) / block_n;
  return {0, hi < num_kv_blocks ? hi : num_kv_blocks};
}
""",
}


def replace_function(text: str, name: str, body: str) -> str:
    start = re.search(rf"^CUBRIDGE_HD \w+ {name}\(", text, re.MULTILINE)
    if start is None:
        raise ValueError(f"no {name} in the header")
    end = text.index("\n}\n", start.start()) + 3
    return text[:start.start()] + body + text[end:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    fa = get_kernel("fa_sm90")
    text = open(args.header).read()
    headers = {"generated": text}
    for name, body in CLOSED_FORM.items():
        headers[f"generated, closed-form {name}"] = replace_function(text, name, body)
    both = text
    for name, body in CLOSED_FORM.items():
        both = replace_function(both, name, body)
    headers["generated, both closed-form"] = both
    b, h, s, d = 4, 32, 4096, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ref = fa.attention(q, k, v, causal=True)[0]
    calls = {"library causal": lambda: fa.attention(q, k, v, causal=True)}
    for name, hdr in headers.items():
        calls[name] = (lambda hdr=hdr: fa.attention(q, k, v, hooks_header=hdr))
    rows = []
    for rep in range(2):  # twice, interleaved, to see the noise
        for name, fn in calls.items():
            diff = (fn()[0].float() - ref.float()).abs().max().item()
            ms = do_bench(fn, warmup=25, rep=200)
            row = {"impl": name, "round": rep, "ms": ms, "max_abs_diff": diff,
                   "tflops": 4 * b * h * band_pairs(s, s, 0, s) * d / (ms * 1e-3) / 1e12}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
