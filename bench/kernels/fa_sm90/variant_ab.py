"""A/B of hook headers for benchmark variants on fa_sm90 (or another library
kernel: `--kernel fa_sm80`): each header is compiled into the variant's kernel
(same plan, same aux slots) and run through the benchmark loop on the same
inputs: the float64 reference first, every output verified before it is timed,
the headers interleaved for `--rounds`.

    python bench/kernels/fa_sm90/variant_ab.py prefix_lm comb_prefix_softcap_sigmoid \\
        --header old=.ab/old --header new=.ab/new --seq-lens 2048,4096 --out DIR

A header argument is LABEL=FOLDER holding <variant>.cuh for the variants named
(one it lacks takes the header cubridge generates for the variant); a FOLDER that
also holds the kernel's source file (fa_sm90.cu, fa_sm80.cu) compiles that source
instead of the library's (an A/B of a kernel edit: put the other side's source
there), built as the library builds its own: a variant past the spill budget
takes the same fallbacks (to time a side without them, put
`#define CUBRIDGE_KEEP_MAX_BY_SUMS 1` ... in its source: a source's own
`#define` wins over the fallback's -D), and one that holds
config.json ({"block_n": 64, "stages": 4}) builds with that tile config instead
of the metadata's (an A/B of tile shapes), and one that holds options.json
({"table_selects": true}) generates its headers with those options of
`generate_header` (an A/B of a lowering choice: aux slots and tables follow).

Device time is short: `--compile-only sm_90a` builds every cubin of the A/B into
the cache ($CUBRIDGE_CACHE_DIR) on a machine without a GPU and stops; carry that
folder to the device and run the same command there without the flag (nvcc then
finds every build cached: bench/results/fa_sm90-ab-2026-11-26-open-early/). With
`--pack ARCHIVE.tar.xz` it also writes exactly the A/B's cache entries there (a few
MB: a whole cache soon outgrows what a device call carries); on the device,
`tar -C "$CUBRIDGE_CACHE_DIR" -xJf ARCHIVE.tar.xz` before the timed run. A timed
run writes the cases it has finished after each one (results.json / .md, marked
PARTIAL until the last), so a call cut short by its time limit keeps them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from cubridge.bench.commands import load_specs
from cubridge.bench.peers import Impl, Prepared
from cubridge.bench.report import (
    collect_metadata,
    invocation,
    render_markdown,
    write_json,
    write_reports,
)
from cubridge.bench.runner import BenchConfig, head_config, run_case
from cubridge.bench.timing import TimingSettings, do_bench_timer
from cubridge.build.compile import CompiledKernel, cache_root
from cubridge.build.driver import device_arch
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.run import bench_dtype
from cubridge.pipeline.variant import CompiledVariant, rules_variant
from cubridge.spec import Spec


def _label_folder(text: str) -> tuple[str, Path]:
    label, _, folder = text.partition("=")
    if not label or not folder:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=FOLDER")
    return label, Path(folder)


def _impl(name: str, variant: CompiledVariant) -> Impl:
    def prepare(case) -> Prepared:  # noqa: ANN001
        q, k, v, aux, scale = case.q, case.k, case.v, case.aux, case.scale
        return Prepared(lambda: variant(q, k, v, scale=scale, **aux)[0])

    return Impl(name, prepare, f"{variant.kernel.name} with this header")


def pack_cache_entries(kernels: list[CompiledKernel], archive: Path) -> int:
    """Write the cache directories of `kernels` to `archive` (.tar.xz), as paths
    relative to the cache root; returns how many."""
    root = cache_root().resolve()
    dirs = sorted({k.directory.resolve() for k in kernels})
    outside = [d for d in dirs if not d.is_relative_to(root)]
    if outside:
        raise SystemExit(f"--pack: {outside[0]} is not under the cache root {root}")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz") as tar:
        for d in dirs:
            tar.add(d, arcname=str(d.relative_to(root)))
    return len(dirs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--header", type=_label_folder, action="append", required=True)
    ap.add_argument("--seq-lens", default="4096")
    ap.add_argument("--configs", default="llama2_7b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", choices=["bf16", "fp16"],
                    help="default: the specs' benchmark dtype (bf16 where listed)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--kernel", default="fa_sm90", help="the library kernel (default fa_sm90)")
    ap.add_argument("--compile-only", metavar="ARCH",
                    help="build every cubin for ARCH (e.g. sm_90a) into the cache and stop")
    ap.add_argument("--pack", type=Path, metavar="ARCHIVE",
                    help="with --compile-only: also write the A/B's cache entries to ARCHIVE "
                         "(.tar.xz), to unpack into $CUBRIDGE_CACHE_DIR on the device")
    args = ap.parse_args()
    if args.out is None and not args.compile_only:
        ap.error("--out is required unless --compile-only")
    if args.pack and not args.compile_only:
        ap.error("--pack goes with --compile-only")

    lib = get_kernel(args.kernel)
    arch = args.compile_only or device_arch(torch.device("cuda"))
    specs = load_specs(args.variants)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype or "")
    if dtype is None:  # (one dtype a run: a spec of fp16 alone goes in a run of its own)
        dtypes = {bench_dtype(spec) for spec in specs}
        if len(dtypes) > 1:
            ap.error("the specs benchmark in different dtypes (" + ", ".join(
                f"{spec.name}: {bench_dtype(spec)}" for spec in specs) + "); run them apart "
                "or pass --dtype")
        dtype = dtypes.pop()
    variants: dict[tuple[str, str], CompiledVariant] = {}
    for spec in specs:
        route = choose_path(spec, lib)
        if route.plan is None:
            sys.exit(f"{spec.name}: not on the rules path ({route.reason})")
        for label, folder in args.header:
            options = folder / "options.json"
            base = generate_header(route.plan, **(
                json.loads(options.read_text()) if options.exists() else {}))
            header = folder / f"{spec.name}.cuh"
            text = header.read_text() if header.exists() else base.text
            variant = rules_variant(spec, lib, dataclasses.replace(base, text=text))
            if (folder / "config.json").exists():
                config = json.loads((folder / "config.json").read_text())
                builds = [lib.build_for(b.head_dim, b.head_dim_v, config=config, causal=b.causal)
                          for b in variant.builds]  # (only the tile config changes)
                variant = CompiledVariant(spec, lib, builds, hooks=variant.hooks)
            if (folder / lib.source.name).exists():
                variant = CompiledVariant(spec, lib, variant.builds, hooks=variant.hooks,
                                          source=(folder / lib.source.name).read_text())
            variants[spec.name, label] = variant
    with ThreadPoolExecutor(max_workers=16) as pool:
        compiled = list(pool.map(lambda v: v.compile(arch), variants.values()))
    if args.compile_only:
        for (name, label), builds in zip(variants, compiled, strict=True):  # (its spills)
            spills = ", ".join(f"{kernel.resources_of(lib.entry).spill_store_bytes} B"
                               for _, _, kernel in builds)
            print(f"{name} {label}: spill stores {spills}")
        print(f"built {len(variants)} variants for {arch} in {cache_root()}")
        if args.pack:
            kernels = [kernel for builds in compiled for _, _, kernel in builds]
            print(f"packed {pack_cache_entries(kernels, args.pack)} cache entries into {args.pack}")
        return
    for v in variants.values():
        v.prepare("cuda")

    config = BenchConfig(seq_lens=[int(s) for s in args.seq_lens.split(",")],
                         configs=args.configs.split(","),
                         dtype=dtype)
    run_and_report([(spec, [_impl(f"{label}#{r + 1}", variants[spec.name, label])
                            for r in range(args.rounds) for label, _ in args.header])
                    for spec in specs], config, args.out, "headers interleaved by round")


def run_and_report(cases: list[tuple[Spec, list[Impl]]], config: BenchConfig, out: Path,
                   how: str) -> None:
    """Each spec's impls through the bench loop at every config and length of
    `config` (the reference first, every output verified), then the reports. The
    cases done so far are written after each one (results.json / .md, marked
    partial), so that a run cut short by a device call's time limit keeps them."""
    timer = do_bench_timer(TimingSettings())
    meta = collect_metadata(invocation(sys.argv), "cuda",
                            f"triton.testing.do_bench, median, L2 flushed; {how}")
    todo = [(spec, cfg_name, s, impls)
            for spec, impls in cases for cfg_name in config.configs for s in config.seq_lens]
    results = []
    for spec, cfg_name, s, impls in todo:
        results.append(run_case(spec, head_config(spec, cfg_name), s, impls, config, timer))
        if len(results) < len(todo):
            write_partial(out, meta, results, len(todo))
    for path in write_reports(out, meta, results).values():
        print(path)


def write_partial(out: Path, meta: dict, results: list, total: int) -> None:
    """results.json and results.md of the cases done so far, saying how many."""
    partial = {**meta, "timing": f"{meta['timing']}; PARTIAL: {len(results)} of {total} cases "
                                 "(the run did not finish)"}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", partial, results)
    (out / "results.md").write_text(render_markdown(partial, results))


if __name__ == "__main__":
    main()
