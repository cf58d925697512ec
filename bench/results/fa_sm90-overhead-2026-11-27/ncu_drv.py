"""One call each of causal and sliding_window_1024 at S = 4096, B = 4, 32 q heads with 32
and with 4 K/V heads (the same 4096 tiles), for ncu's memory counters."""
import torch
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import rules_variant

lib = get_kernel("fa_sm90")
B, S, D = 4, 4096, 128
for name in ["causal", "sliding_window_1024"]:
    spec = load_specs([name])[0]
    var = rules_variant(spec, lib, generate_header(choose_path(spec, lib).plan))
    var.compile("sm_90a"); var.prepare("cuda")
    for HK in (32, 4):
        q = torch.randn(B, 32, S, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        for _ in range(2):
            var(q, k, v, scale=D ** -0.5)
        torch.cuda.synchronize()
        print(name, HK, flush=True)
