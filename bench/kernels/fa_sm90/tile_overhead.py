"""What a query tile costs beyond its key blocks, from untraced kernel times.

The tile trace (tile_trace.py) stamps every block, which slows the kernel 13-22% and
hides latency the untraced kernel exposes. This fits the plain timings of bench or
A/B results instead: for each group of cases of one head configuration, run with the
same build and the same number of tiles,

    time x SMs = a * (key blocks the tiles visit) + b * tiles,

a least-squares fit over cases whose tiles differ in length (sliding windows of
several widths, causal at several S). a is what a visited key block costs, b what a
tile costs besides its blocks (first block's masking, last PV product, epilogue, the
wait for the next tile); b / a is that cost in blocks. The blocks visited per tile
come from the spec's mask on the CPU (block_stats.py: batch 0, head 0). The fit
assumes one per-block cost for every case of a group, so mix only variants whose
steady blocks cost the same (index masks under softmax).

    python bench/kernels/fa_sm90/tile_overhead.py windows/results.json seqlens/results.json \\
        --spec .ab/ow/specs/sliding_window_256.py \\
        --group windows=causal,sliding_window_256,sliding_window_1024 --group causal=causal
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (a script beside its siblings)
from block_stats import block_stats  # noqa: E402

from cubridge.bench.commands import load_specs  # noqa: E402

BLOCK_M = 128  # fa_sm90's query tile (rows) at D = 128
H100_SMS = 132


@dataclass(frozen=True)
class Case:
    variant: str
    config: str
    seq_len: int
    time_ms: float  # median over the case's impls that ran
    tiles: int
    blocks: float  # key blocks visited, over every tile

    @property
    def blocks_per_tile(self) -> float:
        return self.blocks / self.tiles


@dataclass(frozen=True)
class Fit:
    group: str
    config: str
    cases: tuple[Case, ...]
    us_per_block: float  # a
    us_per_tile: float  # b
    max_residual: float  # largest |fit - time| / time over the cases

    @property
    def tile_in_blocks(self) -> float:
        return self.us_per_tile / self.us_per_block


def cases_from_results(results: list[dict], specs: dict, impl_prefix: str = "") -> list[Case]:
    """One Case per result row (cubridge.bench/1 schema): its median time over the
    impls whose name starts with impl_prefix and that ran, and what its tiles visit."""
    visited: dict[tuple[str, int], float] = {}
    cases = []
    for row in results:
        name, s = row["variant"], row["seq_len"]
        if row.get("seq_len_k") not in (None, s):
            raise ValueError(f"{name} at S = {s}: Sk = {row['seq_len_k']}; the fit counts "
                             "square masks only")
        if name not in specs:
            raise KeyError(f"no spec for variant {name!r} of the results: pass its file "
                           "with --spec (benchmark variants resolve by name)")
        times = [i["time_ms"] for i in row["impls"]
                 if i["impl"].startswith(impl_prefix) and i.get("status") == "ok"]
        if not times:
            raise ValueError(f"{name} ({row['config']}, S = {s}): no impl starting with "
                             f"{impl_prefix!r} ran")
        if (name, s) not in visited:
            visited[name, s] = block_stats(specs[name], s, block_m=BLOCK_M)["visited"]
        tiles = row["batch"] * row["hq"] * (s // BLOCK_M)
        cases.append(Case(name, row["config"], s, statistics.median(times), tiles,
                          tiles * visited[name, s]))
    return cases


def fit(group: str, config: str, cases: list[Case], sms: int = H100_SMS) -> Fit:
    """Least squares of time x sms = a * blocks + b * tiles (two unknowns)."""
    if len(cases) < 2:
        raise ValueError(f"group {group!r} ({config}): {len(cases)} case(s); the fit needs "
                         "two or more whose tiles differ in length")
    y = [c.time_ms * 1e3 * sms for c in cases]  # us of one SM's time, summed over SMs
    sxx = sum(c.blocks ** 2 for c in cases)
    sxt = sum(c.blocks * c.tiles for c in cases)
    stt = sum(c.tiles ** 2 for c in cases)
    sxy = sum(c.blocks * v for c, v in zip(cases, y, strict=True))
    sty = sum(c.tiles * v for c, v in zip(cases, y, strict=True))
    det = sxx * stt - sxt ** 2
    if abs(det) <= 1e-9 * sxx * stt:
        raise ValueError(f"group {group!r} ({config}): every case's tiles are as long, so "
                         "a block's cost and a tile's cannot be told apart")
    a = (sxy * stt - sty * sxt) / det
    b = (sty * sxx - sxy * sxt) / det
    worst = max(abs(a * c.blocks + b * c.tiles - v) / v for c, v in zip(cases, y, strict=True))
    return Fit(group, config, tuple(cases), a, b, worst)


def report(fits: list[Fit]) -> str:
    lines = ["| group | config | cases | blocks per tile | a (us / block) | b (us / tile) "
             "| b in blocks | largest residual |", "|---|---|---|---|---|---|---|---|"]
    for f in fits:
        lengths = sorted({round(c.blocks_per_tile, 2) for c in f.cases})
        lines.append(f"| {f.group} | {f.config} | {len(f.cases)} "
                     f"| {lengths[0]:g} ... {lengths[-1]:g} | {f.us_per_block:.3f} "
                     f"| {f.us_per_tile:.3f} | {f.tile_in_blocks:.2f} | {f.max_residual:.1%} |")
    lines += ["", "| config | variant | S | ms | blocks per tile "
              "| share of time in tiles' own cost (by its group's fit) |",
              "|---|---|---|---|---|---|"]
    for f in fits:
        for c in f.cases:
            own = f.us_per_tile * c.tiles
            share = own / (own + f.us_per_block * c.blocks)
            lines.append(f"| {f.config} | {c.variant} | {c.seq_len} | {c.time_ms:.4f} "
                         f"| {c.blocks_per_tile:.2f} | {share:.1%} ({f.group}) |")
    return "\n".join(lines)


def _group(text: str) -> tuple[str, list[str]]:
    label, _, names = text.partition("=")
    variants = [n.strip() for n in names.split(",") if n.strip()]
    if not label or not variants:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=VARIANT,VARIANT,...")
    return label, variants


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="results.json of bench or variant_ab")
    ap.add_argument("--spec", action="append", default=[],
                    help="a spec file for a variant of the results not in examples/specs")
    ap.add_argument("--group", type=_group, action="append",
                    help="LABEL=VARIANT,...: cases fitted together, per config "
                         "(default: every case of a config)")
    ap.add_argument("--impl", default="", help="time only impls whose name starts with this")
    ap.add_argument("--sms", type=int, default=H100_SMS)
    ap.add_argument("--json", type=Path, help="also write the fits here")
    args = ap.parse_args(argv)

    try:
        rows = [row for path in args.results for row in json.loads(path.read_text())["results"]]
        names = sorted({row["variant"] for row in rows})
        extra = {s.name: s for s in load_specs(args.spec)}
        specs = {**{s.name: s for s in load_specs([n for n in names if n not in extra])},
                 **extra}
        cases = cases_from_results(rows, specs, args.impl)
    except (OSError, KeyError, ValueError) as exc:  # (a missing file or spec, a bad row)
        sys.exit(f"tile_overhead: {exc}")
    groups = args.group or [("all", names)]
    fits = []
    for label, variants in groups:
        unknown = sorted(set(variants) - set(names))
        if unknown:
            sys.exit(f"group {label}: no results for {', '.join(unknown)}")
        for config in sorted({c.config for c in cases}):
            picked = [c for c in cases if c.config == config and c.variant in variants]
            if picked:
                try:
                    fits.append(fit(label, config, picked, args.sms))
                except ValueError as exc:
                    sys.exit(f"tile_overhead: {exc}")
    print(report(fits))
    if args.json:
        args.json.write_text(json.dumps([{
            "group": f.group, "config": f.config, "us_per_block": f.us_per_block,
            "us_per_tile": f.us_per_tile, "tile_in_blocks": f.tile_in_blocks,
            "max_residual": f.max_residual,
            "cases": [{"variant": c.variant, "seq_len": c.seq_len, "time_ms": c.time_ms,
                       "tiles": c.tiles, "blocks": c.blocks} for c in f.cases]}
            for f in fits], indent=1))


if __name__ == "__main__":
    main()
