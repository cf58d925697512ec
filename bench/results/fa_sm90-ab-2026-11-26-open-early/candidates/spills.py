"""Spill bytes of fa_sm90 (the working tree's, or SOURCE) for the corpus mods that
spill most and the table-driven benchmark variants, D = 128, bf16, sm_90a."""
import sys, torch
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
sys.path.insert(0, "tests/corpus"); sys.path.insert(0, "tests/kernels")
from attn_gym_corpus import TAKEN
from cubridge.attention import HeadConfig
from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.spec import from_mods

src = Path(sys.argv[1]).read_text() if len(sys.argv) > 1 else None
kernel = get_kernel("fa_sm90")
names = ["generate_doc_mask_mod", "generate_vision_cross", "generate_jetspec_tree", "generate_morton_natten",
         "generate_shared_prefix", "generate_vsa", "generate_temporal_head", "generate_natten", "generate_tiled_natten"]
jobs = []
for c in TAKEN:
    if any(c.name.startswith(n) for n in names):
        sm, mm = c.make("cpu")
        spec = from_mods(sm, mm, name="corpus", configs=[HeadConfig("corpus", 4, 2, 128)], seq_lens=[c.sq])
        jobs.append((c.name.split("(")[0], spec))
for spec in load_specs(["document_causal", "share_question", "relative_position"]):
    jobs.append((spec.name, spec))
def build(job):
    name, spec = job
    hdr = generate_header(choose_path(spec, kernel).plan).text
    kw = {"source": src} if src else {}
    r = kernel.compile(128, torch.bfloat16, "sm_90a", hooks_header=hdr, **kw).resources_of(kernel.metadata.entry)
    return name, r.spill_bytes, r.stack_frame_bytes
with ThreadPoolExecutor(2) as pool:
    for name, sp, st in pool.map(build, jobs):
        print(f"{name:40s} spill {sp:5d}  stack {st}", flush=True)
