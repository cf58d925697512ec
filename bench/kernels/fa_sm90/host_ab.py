"""Host time per call of rules-path variants on fa_sm90 (and do_bench's time per
call at the same shapes), with whichever cubridge package is first on sys.path:
run it once per package on the same machine to compare two launch paths.

    git archive REV cubridge | tar -C old -xf -      # the other side's package
    PYTHONPATH=old python bench/kernels/fa_sm90/host_ab.py old old.json causal,document_causal
    PYTHONPATH=$PWD python bench/kernels/fa_sm90/host_ab.py new new.json causal,document_causal

Host time is the wall time of 400 back-to-back calls over their count (queued, not
synchronised); do_bench times each call's GPU work alone (events around each call).
"""
import json
import sys
import time

import torch
from triton.testing import do_bench

from cubridge.attention import Shape
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.variant import rules_variant
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks

label, out = sys.argv[1], sys.argv[2]
fa = get_kernel("fa_sm90")
rows = []
for name in sys.argv[3].split(","):
    spec = load(f"examples/specs/{name}.py")
    plan = plan_hooks(spec, table_block=fa.table_block(128))
    variant = rules_variant(spec, fa, generate_header(plan)).prepare("cuda")
    for b, h, s in ((1, 1, 128), (16, 32, 1024), (8, 32, 2048)):
        q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        aux = spec.make_aux(Shape(b, h, h, s, s, 128), torch.Generator().manual_seed(0), "cuda") \
            if spec.make_aux else {}
        def fn(q=q, k=k, v=v, aux=aux, variant=variant):
            return variant(q, k, v, **aux)

        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n = 400
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        ms = do_bench(fn, warmup=25, rep=100)
        row = {"impl": label, "variant": name, "shape": f"B{b} H{h} S{s}",
               "host_us_per_call": round(host, 1), "do_bench_us": round(ms * 1e3, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
json.dump(rows, open(out, "w"), indent=1)
