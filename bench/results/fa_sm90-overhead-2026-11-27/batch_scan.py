"""Per-launch fixed cost: time of one call against the batch (S = 4096, llama2_7b heads)."""
import dataclasses, json, sys, statistics as st
import torch, triton
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import rules_variant

out = sys.argv[1]
lib = get_kernel("fa_sm90")
res = []
for name in ["causal", "sliding_window_1024", "full"]:
    spec = load_specs([name])[0]
    route = choose_path(spec, lib)
    var = rules_variant(spec, lib, generate_header(route.plan))
    var.compile("sm_90a"); var.prepare("cuda")
    for B in [1, 2, 4, 8, 16]:
        S, H, D = 4096, 32, 128
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        fn = lambda: var(q, k, v, scale=D ** -0.5)[0]
        fn(); torch.cuda.synchronize()
        flush = [triton.testing.do_bench(fn, warmup=25, rep=100) for _ in range(3)]
        # kernels of one call and their GPU durations
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        kern = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kern.setdefault(e.name, []).append(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
        # back-to-back calls, no flush: time per call
        g0, g1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g0.record()
        for _ in range(20): fn()
        g1.record(); torch.cuda.synchronize()
        r = dict(variant=name, B=B, flush_ms=[round(x, 4) for x in flush],
                 back_to_back_ms=round(g0.elapsed_time(g1) / 20, 4),
                 kernels={n[:60]: [round(x / 1000, 4) for x in ts] for n, ts in kern.items()})
        print(json.dumps(r), flush=True); res.append(r)
        del q, k, v
json.dump(res, open(out, "w"), indent=1)
