"""Writes a variant's generated header and packed aux (aux.bin) for walk.cpp:
python gen.py VARIANT S B [DIR] (PYTHONPATH=<repo>)."""
import sys, torch, numpy as np
from pathlib import Path
from cubridge.attention import Shape
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import rules_variant
lib = get_kernel("fa_sm90")
name, S, B = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = load_specs([name])[0]
route = choose_path(spec, lib)
hdr = generate_header(route.plan)
v = rules_variant(spec, lib, hdr)
shape = Shape(B, 32, 32, S, S, 128)
aux = spec.make_aux(shape, torch.Generator().manual_seed(0), "cpu")
packed = v.pack_aux(aux, shape, "cpu")
out = Path(sys.argv[4] if len(sys.argv) > 4 else "."); (out / "cubridge_hooks.cuh").write_text(hdr.text)
with open(out / "aux.bin", "wb") as f:
    f.write(np.array([len(packed)], np.int64).tobytes())
    for t in packed:
        t = t.contiguous() if not t.is_contiguous() and t.stride().count(0) == 0 else t
        arr = t.numpy() if t.dtype != torch.bool else t.to(torch.uint8).numpy()
        base = np.ascontiguousarray(t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,)).numpy()) if t.numel() else np.zeros(1, arr.dtype)
        sizes = list(t.shape) + [1] * (4 - t.dim()); strides = list(t.stride()) + [0] * (4 - t.dim())
        f.write(np.array([t.element_size(), base.nbytes] + sizes + strides, np.int64).tobytes())
        f.write(base.tobytes())
print("slots", [(tuple(t.shape), t.dtype, t.stride()) for t in packed])
