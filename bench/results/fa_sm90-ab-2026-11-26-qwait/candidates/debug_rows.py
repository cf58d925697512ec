"""Which rows of a candidate's output are wrong (small shapes, alibi/softcap)."""
import sys, torch
from pathlib import Path
from cubridge.attention import Shape
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import CompiledVariant, rules_variant
from cubridge.spec.inputs import make_inputs
lib = get_kernel("fa_sm90")
src = Path(sys.argv[1]).read_text()
for spec in load_specs(sys.argv[2].split(",")):
    base = rules_variant(spec, lib, generate_header(choose_path(spec, lib).plan))
    cand = CompiledVariant(spec, lib, base.builds, hooks=base.hooks, source=src)
    for S in (128, 256, 512):
        shape = Shape(1, 2, 2, S, S, 128)
        g = torch.Generator().manual_seed(0)
        inp = make_inputs(spec, shape, torch.bfloat16, "normal", g)
        dev = lambda t: t.cuda()
        q, k, v = dev(inp.q), dev(inp.k), dev(inp.v)
        aux = {n: dev(t) for n, t in inp.aux.items()}
        ref = base(q, k, v, **aux)[0].float()
        out = cand(q, k, v, **aux)[0].float()
        err = (out - ref).abs().amax(dim=-1)  # [B, H, S]
        bad = (err > 0.05).nonzero().tolist()
        rows = sorted({r[2] for r in bad})
        print(spec.name, S, "bad rows:", len(rows), rows if S == 128 else rows[:8], "max err", err.max().item(), flush=True)
        if S == 128:
            d0 = (out[0, 0, 0] - v[0, 0, 0].float()).abs().max().item()
            r0 = (ref[0, 0, 0] - v[0, 0, 0].float()).abs().max().item()
            print("  row 0 vs v0: cand", d0, "base", r0, "; bad rows with r % 16 < 8:", sum(r % 16 < 8 for r in rows), flush=True)
            print("  head 0 bad:", sorted({r[2] for r in bad if r[1] == 0})[:40], flush=True)
