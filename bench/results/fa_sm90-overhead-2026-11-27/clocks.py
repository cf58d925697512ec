"""SM clock and power while each build runs under do_bench (S = 4096, B = 4)."""
import json, subprocess, sys, time, statistics as st
import torch, triton
from cubridge.attention import Shape
from cubridge.spec import make_aux
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import rules_variant

out = sys.argv[1]
lib = get_kernel("fa_sm90")
res = []
for cfg, (H, HK) in {"llama2_7b": (32, 32), "qwen25_72b": (64, 8)}.items():
    for name in ["causal", "sliding_window_1024", "full", "softcap_causal", "document_causal"]:
        spec = load_specs([name])[0]
        var = rules_variant(spec, lib, generate_header(choose_path(spec, lib).plan))
        var.compile("sm_90a"); var.prepare("cuda")
        B, S, D = 4, 4096, 128
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        aux = {n: x.cuda() for n, x in make_aux(spec, Shape(B, H, HK, S, S, D), torch.Generator().manual_seed(0)).items()}
        fn = lambda: var(q, k, v, scale=D ** -0.5, **aux)[0]
        fn(); triton.testing.do_bench(fn, warmup=25, rep=300)
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                                "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        ms = [triton.testing.do_bench(fn, warmup=25, rep=500) for _ in range(4)]
        smi.terminate(); lines = smi.communicate()[0].strip().splitlines()
        rows = [l.split(", ") for l in lines if l.count(",") == 3]
        clk = [float(r[0]) for r in rows]; pw = [float(r[1]) for r in rows]
        r = dict(config=cfg, variant=name, ms=[round(x, 4) for x in ms], samples=len(rows),
                 sm_mhz_median=st.median(clk), sm_mhz_min=min(clk), sm_mhz_max=max(clk),
                 power_w_median=st.median(pw), reasons=sorted({r[3] for r in rows}))
        print(json.dumps(r), flush=True); res.append(r)
json.dump(res, open(out, "w"), indent=1)
