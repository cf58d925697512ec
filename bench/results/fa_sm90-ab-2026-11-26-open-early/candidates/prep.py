"""What this A/B's device call ran on: each variant's generated header written into
every folder, and every build compiled for sm_90a into the cache
($CUBRIDGE_CACHE_DIR), with its registers and spill bytes printed. Superseded by
`variant_ab.py --compile-only sm_90a`.

    python prep.py VARIANT,VARIANT,... FOLDER [FOLDER ...]
"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import CompiledVariant, rules_variant

lib = get_kernel("fa_sm90")
folders = [Path(f) for f in sys.argv[2:]]
jobs = []
for spec in load_specs(sys.argv[1].split(",")):
    header = generate_header(choose_path(spec, lib).plan)
    for folder in folders:
        (folder / f"{spec.name}.cuh").write_text(header.text)
        variant = rules_variant(spec, lib, header)
        if (folder / "fa_sm90.cu").exists():
            variant = CompiledVariant(spec, lib, variant.builds, hooks=variant.hooks,
                                      source=(folder / "fa_sm90.cu").read_text())
        jobs.append((spec.name, folder.name, variant))


def build(job):
    name, label, variant = job
    resources = [compiled.resources_of(lib.entry) for _, _, compiled in variant.compile("sm_90a")]
    return name, label, [(r.registers, r.spill_store_bytes, r.spill_load_bytes) for r in resources]


t0 = time.time()
with ThreadPoolExecutor(max_workers=2) as pool:
    for name, label, res in pool.map(build, jobs):
        print(name, label, "(registers, spill stores, spill loads) per dtype:", res, flush=True)
print("built in", round(time.time() - t0), "s")
