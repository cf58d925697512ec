"""Launch one variant's kernel a few times (for ncu): launch.py SPEC HEADER_DIR [S]"""
import sys, dataclasses, torch
from pathlib import Path
from cubridge.bench.commands import load_specs
from cubridge.bench.runner import BenchConfig, head_config, build_case
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import rules_variant
name, folder = sys.argv[1], Path(sys.argv[2]); S = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
cfg = sys.argv[4] if len(sys.argv) > 4 else "llama2_7b"
lib = get_kernel("fa_sm90")
spec = load_specs([name])[0]
route = choose_path(spec, lib)
base = generate_header(route.plan)
v = rules_variant(spec, lib, dataclasses.replace(base, text=(folder / f"{name}.cuh").read_text()))
v.prepare("cuda")
config = BenchConfig(seq_lens=[S], configs=[cfg], dtype=torch.bfloat16)
case = build_case(spec, head_config(spec, cfg), S, config)
for _ in range(4):
    v(case.q, case.k, case.v, scale=case.scale, **case.aux)
torch.cuda.synchronize()
print("ok", name, folder)
