"""Headers for variant_ab.py folders and a prebuilt cubin cache (sm_90a)."""
import dataclasses, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import CompiledVariant, rules_variant

variants = sys.argv[1].split(",")
folders = [Path(f) for f in sys.argv[2:]]
lib = get_kernel("fa_sm90")
jobs = []
for spec in load_specs(variants):
    route = choose_path(spec, lib)
    base = generate_header(route.plan)
    for folder in folders:
        (folder / f"{spec.name}.cuh").write_text(base.text)
        v = rules_variant(spec, lib, base)
        if (folder / "fa_sm90.cu").exists():
            v = CompiledVariant(spec, lib, v.builds, hooks=v.hooks, source=(folder / "fa_sm90.cu").read_text())
        jobs.append((spec.name, folder.name, v))
t0 = time.time()
def build(job):
    name, label, v = job
    out = v.compile("sm_90a")
    return name, label, [(str(dt).split('.')[-1], {e: (r.registers, r.spill_store_bytes, r.spill_load_bytes) for e, r in ck.resources.items()}) for b, dt, ck in out]
with ThreadPoolExecutor(max_workers=2) as pool:
    for name, label, res in pool.map(build, jobs):
        print(name, label, res, flush=True)
print("built in", round(time.time() - t0), "s")
