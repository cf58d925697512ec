"""Per-tile cost against K/V sharing: causal and sliding windows at S = 4096, B = 4,
for (q heads, K/V heads) = (32, 32), (32, 4), (64, 8), (64, 64); times as results.json
rows tile_overhead.py reads (do_bench, L2 flushed, median of 3 rounds)."""
import json, sys
import torch, triton
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import rules_variant

out = sys.argv[1]
names = sys.argv[2:]
lib = get_kernel("fa_sm90")
variants = {}
for n in names:
    spec = load_specs([n])[0]
    var = rules_variant(spec, lib, generate_header(choose_path(spec, lib).plan))
    var.compile("sm_90a"); var.prepare("cuda")
    variants[spec.name] = var
rows = []
B, S, D = 4, 4096, 128
for H, HK in [(32, 32), (32, 4), (64, 8), (64, 64)]:
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for rnd in range(3):
        for name, var in variants.items():
            fn = lambda: var(q, k, v, scale=D ** -0.5)[0]
            t = triton.testing.do_bench(fn, warmup=25, rep=100)
            row = next((r for r in rows if r["variant"] == name and r["hq"] == H and r["hk"] == HK), None)
            if row is None:
                row = dict(variant=name, config=f"h{H}_kv{HK}", seq_len=S, batch=B, hq=H, hk=HK, impls=[])
                rows.append(row)
            row["impls"].append(dict(impl=f"lib#{rnd + 1}", status="ok", time_ms=t))
    del q, k, v
for r in rows:
    print(r["config"], r["variant"], [round(i["time_ms"], 4) for i in r["impls"]], flush=True)
json.dump({"meta": {"device": torch.cuda.get_device_name(), "command": " ".join(sys.argv)}, "results": rows}, open(out, "w"), indent=1)
