"""sha256 of fa_sm80's cubins (built without -lineinfo, so that source line numbers do
not enter them): D = 64 / 128, bf16 / fp16, sm_80 / sm_90a, full / causal, and the test
hook headers at D = 128 sm_90a. Run in a checkout, with its code on the path:

    cd TREE && PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$(mktemp -d) python fa_sm80_cubins.py OUT.txt

Two trees' outputs the same line for line: the tiles' kernels are those verified before."""
import hashlib, sys
from pathlib import Path
import torch
import cubridge.build.compile as cm
cm.BASE_FLAGS = tuple(f for f in cm.BASE_FLAGS if f != '-lineinfo')
from cubridge.kernels import get_kernel
k = get_kernel("fa_sm80")
lines = []
for arch in ("sm_80", "sm_90a"):
    for d in (64, 128):
        for dt in (torch.bfloat16, torch.float16):
            for causal in (False, True):
                c = k.compile(d, dt, arch, causal=causal)
                lines.append(f"{arch} D{d} {dt} causal={causal} {hashlib.sha256(c.cubin()).hexdigest()}")
for h in sorted(Path("tests/kernels/hooks").glob("*.cuh")):
    c = k.compile(128, torch.bfloat16, "sm_90a", hooks_header=h.read_text())
    lines.append(f"hooks {h.name} {hashlib.sha256(c.cubin()).hexdigest()}")
Path(sys.argv[1]).write_text("\n".join(lines) + "\n")
print(len(lines), "cubins")
