"""A/B of fa_sm90 design choices in one process: each candidate (a tile config
and/or macros prepended to fa_sm90.cu) is compiled, its output checked against
SDPA on the same inputs, then timed (median of triton's do_bench) on the
docs/benchmark.md workload (bf16, 16k tokens per batch). Writes a JSON and a table.

    python bench/kernels/fa_sm90/ab.py --out DIR [--s 4096] [--heads 32/32] [--label TEXT]
    python bench/kernels/fa_sm90/ab.py --render DIR     # ab.md from DIR/ab.json"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

from cubridge.attention import default_scale
from cubridge.kernels import get_kernel
from cubridge.kernels.fa_sm90 import launch

fa_sm90 = get_kernel("fa_sm90")
# (the library loads kernel.py from its directory: its config class, not an import's)
Sm90TileConfig = fa_sm90.config_type

default_section = launch.schedule_section

# name -> (head dim, tile config, macros ("section": a fixed schedule section)[, source file
# replacing fa_sm90.cu])
CANDIDATES = {
    "d128-nopp": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_PINGPONG": 0}),
    "d64-nopp": (64, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_PINGPONG": 0}),
    "d128-bn128": (128, Sm90TileConfig(128, 128, 2), {}),
    "d128-nopin": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_PIN_PV_WAIT": 0}),
    "d64-bm128-bn128-nopin": (64, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_PIN_PV_WAIT": 0}),
    "d64-bm192-bn128-nopin": (64, Sm90TileConfig(192, 128, 2), {"CUBRIDGE_PIN_PV_WAIT": 0}),
    "d128-sec12": (128, Sm90TileConfig(128, 128, 2), {"section": 12}),
    "d128-q1": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_Q_BUFFERS": 1}),
    "d64-q1": (64, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_Q_BUFFERS": 1}),
    "d128-bn128-eager": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_RESCALE_THRESHOLD": 0}),
    "d128-bn160": (128, Sm90TileConfig(128, 160, 2), {}),
    "d128-bn176": (128, Sm90TileConfig(128, 176, 2), {}),
    "d128-bn64-s4": (128, Sm90TileConfig(128, 64, 4), {}),
    "d64-bm128-bn128": (64, Sm90TileConfig(128, 128, 2), {}),
    "d64-bm128-bn128-s4": (64, Sm90TileConfig(128, 128, 4), {}),
    "d64-bm192-bn128": (64, Sm90TileConfig(192, 128, 2), {}),
    "d64-bm192-bn96": (64, Sm90TileConfig(192, 96, 2), {}),
    "d64-bm192-bn96-s3": (64, Sm90TileConfig(192, 96, 3), {}),
    "d64-bm128-bn192": (64, Sm90TileConfig(128, 192, 2), {}),
    "d64-bm128-bn176": (64, Sm90TileConfig(128, 176, 2), {}),
    # tiles claimed from a counter (the library) with schedule sections of 4, 8 and 16
    # heads, against the static round robin (an earlier source, --source)
    "d128-sec4": (128, Sm90TileConfig(128, 128, 2), {"section": 4}),
    "d128-sec8": (128, Sm90TileConfig(128, 128, 2), {"section": 8}),
    "d128-sec16": (128, Sm90TileConfig(128, 128, 2), {"section": 16}),
    # the register split (FlashAttention-4's Hopper kernel: 24 / 240) and the PV wait
    # pinned after the exponentials, on the claimed schedule
    "d128-p24": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_PRODUCER_REGS": 24}),
    "d128-pin": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_PIN_PV_WAIT": 1}),
    # steady blocks that always reduce the row max (before the max kept by row sums)
    "d128-nosums": (128, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_KEEP_MAX_BY_SUMS": 0}),
    "d64-nosums": (64, Sm90TileConfig(128, 128, 2), {"CUBRIDGE_KEEP_MAX_BY_SUMS": 0}),
}


def source_of(candidate: tuple) -> str | None:
    macros = {k: v for k, v in candidate[2].items() if k != "section"}
    path = Path(candidate[3]) if len(candidate) > 3 else None
    if not macros and path is None:
        return None
    head = "".join(f"#define {k} {v}\n" for k, v in macros.items())
    return head + (path or fa_sm90.source).read_text()


def fresh_error(run, out: torch.Tensor, ref: torch.Tensor) -> float:
    """One launch into NaNs (unwritten rows fail too): its relative error to ref."""
    out.fill_(float("nan"))
    run()
    return ((out.float() - ref).norm() / ref.norm()).item()


def tflops(b, hq, s, d, ms, causal):
    pairs = s * (s + 1) / 2 if causal else s * s
    return 4 * b * hq * pairs * d / (ms * 1e-3) / 1e12


def render(directory: Path) -> str:
    """The markdown table of one A/B run (written beside its JSON)."""
    data = json.loads((directory / "ab.json").read_text())
    meta = data["meta"]
    lines = [f"{meta['device']}, {meta['date']}, torch {meta['torch']}"
             + (f"; source: {meta['label']}" if meta.get("label") else ""), "",
             "| candidate | mode | S | heads | round | TFLOP/s | rel err vs SDPA |",
             "|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        value = f"{r['tflops']:.1f}" if "tflops" in r else f"- ({r['error'][:60]})"
        err = f"{r['rel_err']:.2e}" if "rel_err" in r else "-"
        lines.append(f"| {r['candidate']} | {r['mode']} | {r['S']} | {r['heads']} "
                     f"| {r.get('round', 0)} | {value} "
                     f"| {err} |")
    text = "\n".join(lines) + "\n"
    (directory / "ab.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", type=Path, help="write DIR/ab.md from DIR/ab.json and stop")
    ap.add_argument("--label", default="", help="what source is measured (commit, patch)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--s", type=int, nargs="+", default=[4096])
    ap.add_argument("--heads", default="32/32")
    ap.add_argument("--only", nargs="*", help="candidate names (default: all)")
    ap.add_argument("--source", action="append", default=[], metavar="NAME=D:PATH",
                    help="one more candidate: head dim D's library config with the kernel "
                         "source at PATH (e.g. an earlier commit's fa_sm90.cu)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every candidate this many times, interleaved (drift shows)")
    args = ap.parse_args()
    if args.render:
        print(render(args.render))
        return
    if args.out is None:
        ap.error("--out is required")
    from triton.testing import do_bench  # (GPU machines only; --render needs no triton)

    hq, hk = (int(x) for x in args.heads.split("/"))
    for extra in args.source:
        name, _, spec = extra.partition("=")
        d, _, path = spec.partition(":")
        CANDIDATES[name] = (int(d), fa_sm90.metadata.configs[int(d)], {}, path)
    names = (args.only or list(CANDIDATES)) + [e.partition("=")[0] for e in args.source]
    jobs = [(n, c) for n in names for c in (False, True)]
    t0 = time.time()

    def build(job):
        name, causal = job
        d, cfg = CANDIDATES[name][:2]
        try:
            return job, fa_sm90.launchable(d, torch.bfloat16, "sm_90a", causal=causal,
                                           source=source_of(CANDIDATES[name]), config=cfg), None
        except Exception as exc:  # a candidate that does not build is reported, not fatal
            return job, None, f"{type(exc).__name__}: {str(exc)[:300]}"

    with ThreadPoolExecutor(16) as pool:
        built = {job: (k, err) for job, k, err in pool.map(build, jobs)}
    print(f"built {len(jobs)} kernels in {time.time() - t0:.0f} s", flush=True)
    rows = []
    for s, rnd in ((s, r) for r in range(args.rounds) for s in args.s):
        b = 16384 // s
        inputs = {}
        for name, causal in jobs:
            d = CANDIDATES[name][0]
            kernel, err = built[(name, causal)]
            mode = "causal" if causal else "full"
            row = {"candidate": name, "mode": mode, "S": s, "B": b, "heads": args.heads,
                   "round": rnd}
            if err is not None:
                rows.append({**row, "error": err})
                print(f"{name:24} {mode:7} S={s}: build failed: {err}", flush=True)
                continue
            if d not in inputs:
                g = torch.Generator(device="cuda").manual_seed(s + d)
                inputs[d] = tuple(torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                                              generator=g) for h in (hq, hk, hk))
            q, k, v = inputs[d]
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 is_causal=causal, enable_gqa=hq != hk)
            out = torch.empty_like(q)
            lse = q.new_empty(q.shape[:3], dtype=torch.float32)
            run = functools.partial(kernel.run, q, k, v, default_scale(d), [], out, lse)
            forced = CANDIDATES[name][2].get("section")
            launch.schedule_section = ((lambda *a, n=forced: n) if forced else default_section)
            err_rel = fresh_error(run, out, ref)
            ms = do_bench(run, warmup=100, rep=500, return_mode="median") if err_rel < 1e-2 else 0
            # (and once more after hundreds of launches)
            err_after = fresh_error(run, out, ref) if err_rel < 1e-2 else err_rel
            if not err_after < 1e-2:
                when = "after timing" if err_rel < 1e-2 else "before timing"
                rows.append({**row, "error": f"wrong output {when}: rel err {err_after:.3g}"})
                print(f"{name:24} {mode:7} S={s}: WRONG {when}, rel err {err_after:.3g}",
                      flush=True)
                continue
            res = kernel.compiled.resources_of(fa_sm90.entry)
            rows.append({**row, "ms": ms, "tflops": tflops(b, hq, s, d, ms, causal),
                         "rel_err": err_rel, "spill_bytes": res.spill_store_bytes})
            print(f"{name:24} {mode:7} S={s}: {rows[-1]['tflops']:7.1f} TFLOP/s  "
                  f"(err {err_rel:.2e})", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
            "torch": torch.__version__, "label": args.label,
            "command": "python bench/kernels/fa_sm90/ab.py " + " ".join(sys.argv[1:])}
    (args.out / "ab.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(render(args.out))


if __name__ == "__main__":
    main()
