"""Where fa_sm90's time goes per tile: builds the library kernel with
CUBRIDGE_TILE_TRACE (clock stamps of each tile's phases and the cycles each
consumer waits on K, V, Q and the mma token; every CTA's start and end on the
global timer), checks its output against SDPA, runs it once more and reads the
trace back from the cubin's globals. Writes trace.json (the summary) and
trace.md; the raw per-tile rows go to rows.json.gz ({candidate-mode: rows}; one
file, as the device returns few per call). Where the source stamps them (since
2026-11-27), the boundary between two live tiles is also split into its steps
(opening the next tile, the last PV product, the epilogue, the next S product)
and the epilogue into its own.

    python bench/kernels/fa_sm90/tile_trace.py --out DIR [--s 4096] [--heads 32/32]
        [--candidate NAME=MACRO=VALUE,...]   (default: the library's source as is)
        [--variant SPEC ...]   (benchmark variants too, with their generated hooks)
        [--source PATH]        (a kernel source in place of the library's fa_sm90.cu)
        [--producer-side] [--per-warp]   (trace_sides.py's edits of the source)

With --producer-side the source also records the producer's side (the global
cubridge_producer_trace: per tile its classification cycles and its waits for a free
Q buffer, K slot and V slot), summarised beside each consumer's; with --per-warp each
consumer warp's waits (cubridge_warp_trace: per tile and warp, the cycles lane 0
waited for the mma token, K and V). A --source that already has them is read the same
way. Both sides slow the traced build (see the table's "traced" column).
`--compile-only sm_90a` builds every cubin into the cache ($CUBRIDGE_CACHE_DIR) on a
machine without a GPU and stops; the same command on the device then finds them.
Each candidate is timed without the trace too (median of triton's do_bench), so
the trace's own cost shows. A variant is built as `cubridge run` builds it (the
rules path's header and build), checked against its spec's reference and counted
in its allowed pairs; its mode is its name."""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from cubridge.attention import default_scale
from cubridge.build.driver import load_cubin
from cubridge.kernels import get_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (a script beside its siblings)
import trace_sides  # noqa: E402

fa_sm90 = get_kernel("fa_sm90")
FIELDS = ["top", "first", "steady_end", "end", "wait_k", "wait_v", "wait_token", "wait_q",
          "blocks", "tile", "sm", "boundary_issued", "boundary_pv_done", "boundary_stored",
          "epilogue_free", "epilogue_staged", "epilogue_synced"]
# Fields stamped only by later sources, each group after the one before: the kernel
# enum entry that marks a source as having it, and the group's first field.
LATER_FIELDS = [("kTraceBoundaryIssued", "boundary_issued"),
                ("kTraceEpilogueFree", "epilogue_free")]
# The boundary's steps (tiles whose next tile is live too): the stamps they run between.
BOUNDARY_STEPS = {"open": ("steady_end", "boundary_issued"),
                  "pv": ("boundary_issued", "boundary_pv_done"),
                  "epilogue": ("boundary_pv_done", "boundary_stored"),
                  "s0": ("boundary_stored", "end")}
# ... and the epilogue's: the staging rows freed (and the LSE stored; older sources wrote
# it with O), O written, fenced and synced, the TMA store issued.
EPILOGUE_STEPS = {"free": ("boundary_pv_done", "epilogue_free"),
                  "stage": ("epilogue_free", "epilogue_staged"),
                  "sync": ("epilogue_staged", "epilogue_synced"),
                  "store": ("epilogue_synced", "boundary_stored")}
FIELD_INDEX = {name: i for i, name in enumerate(FIELDS)}
TRACE_CTAS, TRACE_TILES = 144, 128  # fa_sm90.cu's kTraceCtas, kTraceTiles
PRODUCER_FIELDS = ["top", "q", "end", "classify", "wait_q_empty", "wait_k_empty",
                   "wait_v_empty", "staged", "claim", "blocks", "tile"]
WARP_FIELDS = ["wait_token", "wait_k", "wait_v"]  # per consumer warp (cubridge_warp_trace)


def _candidate(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition("=")
    macros = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return name, macros


def _source(macros: dict[str, str], trace: bool, path: Path | None = None,
            sides: tuple[str, ...] = ()) -> str:
    """The kernel source of one build: `path` (else the library's), with the defines
    ahead and, in the traced build, the trace's `sides` ("producer", "warp")."""
    defs = {**macros, **({"CUBRIDGE_TILE_TRACE": "1"} if trace else {})}
    text = (path or fa_sm90.source).read_text()
    if trace and "producer" in sides:
        text = trace_sides.producer_side(text)
    if trace and "warp" in sides:
        text = trace_sides.warp_side(text)
    return "".join(f"#define {k} {v}\n" for k, v in defs.items()) + text


def _module(kernel):
    return load_cubin(kernel.compiled.key, kernel.compiled.cubin_path, torch.device("cuda"))


def trace_fields(source: str) -> int:
    """How many of FIELDS the kernel `source` stamps (older sources stamp fewer)."""
    for marker, first in LATER_FIELDS:
        if marker not in source:
            return FIELD_INDEX[first]
    return len(FIELDS)


def _read_trace(kernel, consumers: int, source: str) -> tuple[np.ndarray, np.ndarray]:
    """[CTA, consumer, tile, field] of the trace (fields the kernel `source` lacks are 0)
    and the CTAs' [start, end] times."""
    module = _module(kernel)
    nfields = trace_fields(source)
    n = TRACE_CTAS * consumers * TRACE_TILES * nfields
    rows = np.frombuffer(module.read_global("cubridge_tile_trace", 4 * n), dtype=np.uint32)
    rows = rows.reshape(TRACE_CTAS, consumers, TRACE_TILES, nfields).astype(np.int64)
    rows = np.pad(rows, ((0, 0), (0, 0), (0, 0), (0, len(FIELDS) - nfields)))
    cta = np.frombuffer(module.read_global("cubridge_cta_time", 8 * 2 * TRACE_CTAS),
                        dtype=np.uint64)
    return rows, cta.reshape(TRACE_CTAS, 2).astype(np.int64)


def _read_producer_trace(kernel) -> np.ndarray | None:
    """[CTA, tile, field] of the producer's trace, or None when the source has none."""
    if b"cubridge_producer_trace" not in kernel.compiled.cubin():
        return None
    n = TRACE_CTAS * TRACE_TILES * len(PRODUCER_FIELDS)
    rows = np.frombuffer(_module(kernel).read_global("cubridge_producer_trace", 4 * n),
                         dtype=np.uint32)
    return rows.reshape(TRACE_CTAS, TRACE_TILES, len(PRODUCER_FIELDS)).astype(np.int64)


def _read_warp_trace(kernel, consumers: int) -> np.ndarray | None:
    """[CTA, consumer, tile, warp, field] of the per-warp waits, or None when the source
    has none."""
    if b"cubridge_warp_trace" not in kernel.compiled.cubin():
        return None
    shape = (TRACE_CTAS, consumers, TRACE_TILES, 4, len(WARP_FIELDS))
    rows = np.frombuffer(_module(kernel).read_global("cubridge_warp_trace", 4 * np.prod(shape)),
                         dtype=np.uint32)
    return rows.reshape(shape).astype(np.int64)


def summarize_warps(warps: np.ndarray, rows: np.ndarray, grid: int) -> dict:
    """Per consumer and warp: mean cycles per tile waited for the token, K and V, over the
    tiles with an end stamp (warp 0 shares its SMSP with the producer warp)."""
    out = {}
    for c in range(warps.shape[1]):
        live = rows[:grid, 0, :, FIELD_INDEX["end"]] != 0  # [CTA, tile]
        sel = warps[:grid, c][live]  # [tiles, warp, field]
        out[f"consumer{c}"] = {f: [float(sel[:, w, i].mean()) for w in range(4)]
                               for i, f in enumerate(WARP_FIELDS)}
    return out


def summarize_producer(rows: np.ndarray, grid: int) -> dict:
    """Where the producer's cycles went, over every CTA's tiles (a tile runs from its
    start stamp to the next tile's; a CTA's last tile ends at its end stamp)."""
    f = {name: i for i, name in enumerate(PRODUCER_FIELDS)}
    totals = dict.fromkeys(("cycles", "classify", "wait_q_empty", "wait_k_empty",
                            "wait_v_empty", "staged", "claim", "q_after_top"), 0.0)
    tiles = blocks = 0
    for c in range(grid):
        r = rows[c]
        n = int((r[:, f["end"]] != 0).sum())
        for i in range(n):
            end = r[i + 1, f["top"]] if i + 1 < n else r[i, f["end"]]
            totals["cycles"] += _diff(r[i, f["top"]], end)
            totals["q_after_top"] += _diff(r[i, f["top"]], r[i, f["q"]])
            for k in ("classify", "wait_q_empty", "wait_k_empty", "wait_v_empty", "staged",
                      "claim"):
                totals[k] += r[i, f[k]]
            blocks += int(r[i, f["blocks"]])
        tiles += n
    cycles = totals.pop("cycles")
    return {"tiles": tiles, "blocks": blocks,
            "share_of_cycles": {k: v / cycles for k, v in totals.items() if k != "q_after_top"},
            "cycles_per_block": {k: v / max(blocks, 1) for k, v in totals.items()},
            "q_issued_after_tile_start": totals["q_after_top"] / max(tiles, 1)}


def _diff(a, b):
    """b - a on the 32-bit SM clock (wraps)."""
    return (b - a) % (1 << 32)


def _steps(row: np.ndarray, steps: dict[str, tuple[str, str]], prefix: str = "") -> dict:
    """Cycles of each step of one tile's row: from its first stamp to its second."""
    return {prefix + k: int(_diff(row[FIELD_INDEX[a]], row[FIELD_INDEX[b]]))
            for k, (a, b) in steps.items()}


def summarize(rows: np.ndarray, cta: np.ndarray, grid: int) -> dict:
    """Per consumer: where the cycles of its tiles went, and a fit of tile time
    against blocks; per CTA: how evenly the persistent grid finished. A CTA's
    tiles are its rows with an end stamp (the trace is zeroed before the run)."""
    tiles_per_cta = [int((rows[i, 0, :, 3] != 0).sum()) for i in range(grid)]
    out = {}
    for c in range(rows.shape[1]):
        per_tile = []
        for cta_i in range(grid):
            n = tiles_per_cta[cta_i]
            r = rows[cta_i, c, :n]
            for i in range(n):
                nxt = _diff(r[i, 0], r[i + 1, 0]) if i + 1 < n else _diff(r[i, 0], r[i, 3])
                per_tile.append({"blocks": int(r[i, 8]), "dur": int(nxt),
                                 "first": int(_diff(r[i, 0], r[i, 1])),
                                 "steady": int(_diff(r[i, 1], r[i, 2])),
                                 "boundary": int(_diff(r[i, 2], r[i, 3])),
                                 "gap": int(nxt - _diff(r[i, 0], r[i, 3])),
                                 "wait_k": int(r[i, 4]), "wait_v": int(r[i, 5]),
                                 "wait_token": int(r[i, 6]), "wait_q": int(r[i, 7])})
                if r[i, FIELD_INDEX["boundary_issued"]] != 0:  # (its steps were stamped)
                    per_tile[-1]["steps"] = _steps(r[i], BOUNDARY_STEPS)
                if r[i, FIELD_INDEX["epilogue_free"]] != 0:  # (and the epilogue's)
                    per_tile[-1]["steps"] |= _steps(r[i], EPILOGUE_STEPS, "epilogue_")
        stepped = [t.pop("steps") for t in per_tile if "steps" in t]
        blocks = np.array([t["blocks"] for t in per_tile], dtype=float)
        dur = np.array([t["dur"] for t in per_tile], dtype=float)
        steady_blocks = np.maximum(blocks - 1, 1)
        steady_per_block = float(np.median(
            [t["steady"] / sb for t, sb in zip(per_tile, steady_blocks, strict=True)
             if t["blocks"] > 1]))
        if np.ptp(blocks) > 0:
            a, b = np.polyfit(blocks, dur, 1)
        else:  # (every tile the same length: the steady blocks' cost, the rest per tile)
            a = steady_per_block
            b = float(dur.mean() - a * blocks[0])
        total = dur.sum()
        s = {k: float(sum(t[k] for t in per_tile)) for k in per_tile[0] if k != "blocks"}
        out[f"consumer{c}"] = {
            "tiles": len(per_tile), "blocks": int(blocks.sum()),
            "cycles_per_block_fit": a, "cycles_per_tile_fit": b,
            "tile_overhead_in_blocks": b / a,
            "steady_cycles_per_block": steady_per_block,
            "share_of_cycles": {k: s[k] / total for k in
                                ("first", "steady", "boundary", "gap", "wait_k", "wait_v",
                                 "wait_token", "wait_q")},
            "mean_cycles_per_tile": {k: s[k] / len(per_tile) for k in s},
            # mean cycles of each step of the boundary, over the tiles that stamped them
            "boundary_steps": ({k: float(np.mean([t[k] for t in stepped]))
                                for k in stepped[0]} | {"tiles": len(stepped)}
                               if stepped else None),
        }
    start, end = cta[:grid, 0], cta[:grid, 1]
    busy = (end - start).astype(float)
    span = float(end.max() - start.min())
    out["grid"] = {"ctas": grid, "makespan_us": span / 1e3, "mean_cta_us": busy.mean() / 1e3,
                   "balance": busy.mean() / span, "start_spread_us": float(np.ptp(start)) / 1e3,
                   "end_spread_us": float(np.ptp(end)) / 1e3}
    return out


def tflops(b, hq, s, d, ms, causal, pairs=None):
    """TFLOP/s over the allowed pairs (per batch and head; causal or full by default)."""
    if pairs is None:
        pairs = s * (s + 1) / 2 if causal else s * s
    return 4 * b * hq * pairs * d / (ms * 1e-3) / 1e12


def rules_build(name: str):
    """A benchmark variant's spec, rules-path variant and header, as `cubridge run`
    makes them."""
    from cubridge.bench.commands import load_specs
    from cubridge.lower.hook_header import generate_header
    from cubridge.pipeline.route import choose_path
    from cubridge.pipeline.variant import rules_variant

    spec = load_specs([name])[0]
    route = choose_path(spec, fa_sm90)
    if route.plan is None:
        sys.exit(f"{name}: not on the rules path ({route.reason})")
    header = generate_header(route.plan)
    return spec, rules_variant(spec, fa_sm90, header), header


def variant_case(name: str, q, k, v):
    """A benchmark variant as `cubridge run` builds it on the rules path: (mode,
    causal build flag, header, packed aux, reference output, allowed pairs per
    batch and head)."""
    from cubridge.attention import Shape
    from cubridge.bench.work import count_pairs
    from cubridge.spec import bind_mods

    spec, variant, header = rules_build(name)
    b, hq, s, d = q.shape
    shape = Shape(b, hq, k.shape[1], s, k.shape[2], d)
    aux = spec.make_aux(shape, torch.Generator().manual_seed(0), "cuda") if spec.make_aux else {}
    ref = spec.reference(q.float(), k.float(), v.float(), **aux)
    ref = ref[0] if isinstance(ref, tuple) else ref
    stats, _ = count_pairs(spec, bind_mods(spec, aux), shape, "cuda")  # (as the bench counts)
    pairs = stats.allowed_pairs / (b * hq)
    return (spec.name, variant.builds[0].causal, header.text,
            variant.pack_aux(aux, shape, "cuda"), ref, pairs)


def render(data: dict) -> str:
    meta = data["meta"]
    lines = [f"{meta['device']}, {meta['date']}, commit {meta['commit']}: `{meta['command']}`", "",
             "| candidate | mode | TFLOP/s | traced | cycles/block | tile overhead (blocks) "
             "| first | steady | boundary | wait K | wait V | wait token | wait Q | balance |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["runs"]:
        c0 = r["summary"]["consumer0"]
        sh = c0["share_of_cycles"]
        lines.append(
            f"| {r['candidate']} | {r['mode']} | {r['tflops']:.1f} | {r['tflops_traced']:.1f} "
            f"| {c0['cycles_per_block_fit']:.0f} | {c0['tile_overhead_in_blocks']:.2f} | "
            + " | ".join(f"{100 * sh[k]:.1f}%" for k in
                         ("first", "steady", "boundary", "wait_k", "wait_v", "wait_token",
                          "wait_q"))
            + f" | {r['summary']['grid']['balance']:.3f} |")
    stepped = [r for r in data["runs"] if r["summary"]["consumer0"].get("boundary_steps")]
    if stepped:
        lines += ["", "The boundary's steps, consumer 0 (mean cycles per tile whose next tile is "
                  "live; steady_per_block is a steady block's cost for scale):", "",
                  "| candidate | mode | first block | open next (waits Q, V, K, token) "
                  "| last PV retires | epilogue | next S lands | boundary | steady_per_block |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in stepped:
            c0 = r["summary"]["consumer0"]
            st, mean = c0["boundary_steps"], c0["mean_cycles_per_tile"]
            lines.append(
                f"| {r['candidate']} | {r['mode']} | {mean['first']:.0f} | "
                + " | ".join(f"{st[k]:.0f}" for k in BOUNDARY_STEPS)
                + f" | {sum(st[k] for k in BOUNDARY_STEPS):.0f} | "
                f"{c0['steady_cycles_per_block']:.0f} |")
        split = [r for r in stepped
                 if "epilogue_free" in r["summary"]["consumer0"]["boundary_steps"]]
        if split:
            lines += ["", "The epilogue's steps, consumer 0 (mean cycles per tile, as above):", "",
                      "| candidate | mode | LSE stored, staging rows free (all warps in) "
                      "| O written | fenced, all warps in | TMA store issued | epilogue |",
                      "|---|---|---|---|---|---|---|"]
            for r in split:
                st = r["summary"]["consumer0"]["boundary_steps"]
                lines.append(f"| {r['candidate']} | {r['mode']} | " + " | ".join(
                    f"{st['epilogue_' + k]:.0f}" for k in EPILOGUE_STEPS)
                    + f" | {st['epilogue']:.0f} |")
    warp_runs = [r for r in data["runs"] if "warps" in r["summary"]]
    if warp_runs:
        lines += ["", "Each consumer warp's waits (mean cycles per tile; warp 0 of each consumer "
                  "shares SMSP 0 with the producer warp):", "",
                  "| candidate | mode | consumer | token, warps 0-3 | K, warps 0-3 "
                  "| V, warps 0-3 |",
                  "|---|---|---|---|---|---|"]
        for r in warp_runs:
            for c, w in r["summary"]["warps"].items():
                lines.append(f"| {r['candidate']} | {r['mode']} | {c} | " + " | ".join(
                    " / ".join(f"{x:.0f}" for x in w[f]) for f in WARP_FIELDS) + " |")
    producer_runs = [r for r in data["runs"] if "producer" in r["summary"]]
    if producer_runs:
        keys = ("classify", "wait_q_empty", "wait_k_empty", "wait_v_empty", "staged", "claim")
        if all(r["summary"]["producer"]["share_of_cycles"]["wait_v_empty"] == 0
               for r in producer_runs):  # (since 2026-12-06 the V loader waits for V slots)
            keys = tuple(k for k in keys if k != "wait_v_empty")
        lines += ["", "The producer's cycles (share of its tiles' cycles; per visited block):", "",
                  "| candidate | mode | " + " | ".join(keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        for r in producer_runs:
            pr = r["summary"]["producer"]
            lines.append(f"| {r['candidate']} | {r['mode']} | " + " | ".join(
                f"{100 * pr['share_of_cycles'][k]:.1f}% ({pr['cycles_per_block'][k]:.0f})"
                for k in keys) + " |")
    lines += ["", "Shares are of consumer 0's cycles over its tiles (waits are inside the "
              "phases); the fit is tile cycles = a * blocks + b, overhead = b / a (with tiles "
              "all of one length, a is the steady blocks' median cost); balance = mean CTA "
              "time / makespan (global timer)."]
    return "\n".join(lines) + "\n"


def compile_only(args) -> None:
    """Every build main() would make, compiled into the cache for args.compile_only."""
    cases = [(macros, causal, None) for _, macros in (args.candidate or [("library", {})])
             for causal in (False, True)]
    for name in args.variant:
        _, variant, header = rules_build(name)
        cases.append(({}, variant.builds[0].causal, header.text))
    for macros, causal, header in cases:
        for trace in (False, True):
            fa_sm90.compile(args.d, torch.bfloat16, args.compile_only, causal=causal,
                            hooks_header=header,
                            source=_source(macros, trace, args.source, args.sides))
    print(f"compiled {2 * len(cases)} builds for {args.compile_only}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--heads", default="32/32")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--candidate", type=_candidate, action="append", default=[])
    ap.add_argument("--variant", action="append", default=[],
                    help="a benchmark variant (examples/specs name), traced after the candidates")
    ap.add_argument("--source", type=Path, help="kernel source in place of fa_sm90.cu")
    ap.add_argument("--commit", default="")
    ap.add_argument("--producer-side", action="store_true",
                    help="also trace the producer (trace_sides.producer_side)")
    ap.add_argument("--per-warp", action="store_true",
                    help="also trace each consumer warp's waits (trace_sides.warp_side)")
    ap.add_argument("--compile-only", metavar="ARCH",
                    help="build every cubin for ARCH (e.g. sm_90a) into the cache and stop")
    args = ap.parse_args()
    args.sides = ("producer",) * args.producer_side + ("warp",) * args.per_warp
    try:  # (the sides edit the source by exact text: say so here if it has moved)
        _source({}, True, args.source, args.sides)
    except ValueError as e:
        sys.exit(f"tile_trace: {e}")
    if args.compile_only:
        compile_only(args)
        return
    from triton.testing import do_bench  # (GPU machines only)

    candidates = args.candidate or [("library", {})]
    hq, hk = (int(x) for x in args.heads.split("/"))
    s, d = args.s, args.d
    b = 16384 // s
    g = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
               for h in (hq, hk, hk))
    args.out.mkdir(parents=True, exist_ok=True)
    runs, raw_rows = [], {}
    # (candidate, mode, causal build, header, aux, reference, allowed pairs)
    cases = []
    for name, macros in candidates:
        for causal in (False, True):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                 is_causal=causal, enable_gqa=hq != hk)
            cases.append((name, macros, "causal" if causal else "full", causal, None, [], ref,
                          None))
    for spec_name in args.variant:
        mode, causal, header, aux, ref, pairs = variant_case(spec_name, q, k, v)
        cases.append(("library", {}, mode, causal, header, aux, ref, pairs))
    for name, macros, mode, causal, header, aux, ref, pairs in cases:
        timed = {}
        for trace in (False, True):
            source = _source(macros, trace, args.source, args.sides)
            kernel = fa_sm90.launchable(d, torch.bfloat16, "sm_90a", causal=causal,
                                        hooks_header=header, source=source)
            out = torch.full_like(q, float("nan"))
            lse = q.new_empty(q.shape[:3], dtype=torch.float32)
            run = functools.partial(kernel.run, q, k, v, default_scale(d), aux, out, lse)
            run()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                sys.exit(f"{name} {mode} trace={trace}: wrong output (rel err {err:.3g})")
            timed[trace] = do_bench(run, warmup=100, rep=300, return_mode="median")
            if trace:
                producer = b"cubridge_producer_trace" in kernel.compiled.cubin()
                for name_ in ("cubridge_tile_trace", "cubridge_cta_time") + (
                        ("cubridge_producer_trace",) if producer else ()):
                    _module(kernel).zero_global(name_)
                run()
                torch.cuda.synchronize()
                info = kernel.compiled.resources_of(fa_sm90.entry)
                consumers = fa_sm90.config(d).block_m // 64
                rows, cta = _read_trace(kernel, consumers, source)
                producer_rows = _read_producer_trace(kernel)
                warp_rows = _read_warp_trace(kernel, consumers)
        num_tiles = b * hq * (-(-s // fa_sm90.config(d).block_m))
        grid = min(num_tiles, torch.cuda.get_device_properties(0).multi_processor_count)
        summary = summarize(rows, cta, grid)
        if producer_rows is not None:
            summary["producer"] = summarize_producer(producer_rows, grid)
        if warp_rows is not None:
            summary["warps"] = summarize_warps(warp_rows, rows, grid)
        raw_rows[f"{name}-{mode}"] = rows[:grid].tolist()
        runs.append({"candidate": name, "macros": macros, "mode": mode,
                     "tflops": tflops(b, hq, s, d, timed[False], causal, pairs),
                     "tflops_traced": tflops(b, hq, s, d, timed[True], causal, pairs),
                     "registers": info.registers, "summary": summary})
        print(json.dumps(runs[-1], indent=1), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
            "commit": args.commit, "S": s, "B": b, "heads": args.heads, "D": d,
            "command": "python bench/kernels/fa_sm90/tile_trace.py " + " ".join(sys.argv[1:])}
    data = {"meta": meta, "runs": runs}
    (args.out / "trace.json").write_text(json.dumps(data, indent=1))
    with gzip.open(args.out / "rows.json.gz", "wt") as f:
        json.dump(raw_rows, f)
    (args.out / "trace.md").write_text(render(data))
    print(render(data))


if __name__ == "__main__":
    main()
