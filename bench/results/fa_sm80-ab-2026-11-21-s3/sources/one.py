"""Run one fa_sm80 launch set (for ncu): python .ab/one.py SOURCE_PATH|tree causal|full|VARIANT"""
import math, sys, torch
from cubridge.kernels import fa_sm80
from cubridge.kernels.fa_sm80.perf import generated_headers
src = None if sys.argv[1] == "tree" else open(sys.argv[1]).read()
what = sys.argv[2]
B, H, S, D = 4, 32, 4096, 128
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
if what in ("causal", "full"):
    for _ in range(3):
        fa_sm80.attention(q, k, v, causal=what == "causal", source=src)
else:
    from cubridge.attention import Shape
    spec, header = generated_headers([what])[what]
    shape = Shape(B, H, H, S, S, D)
    aux = dict(spec.make_aux(shape, torch.Generator().manual_seed(0), torch.device("cuda"))) if spec.make_aux else {}
    packed = header.pack_aux(aux, shape)
    for _ in range(3):
        fa_sm80.attention(q, k, v, hooks_header=header.text, aux=packed, source=src)
torch.cuda.synchronize()
