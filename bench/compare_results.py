"""One implementation's TFLOP/s in two `cubridge bench` results, case by case:
an A/B of two commits or two kernels (each results.json from its own run).

    python bench/compare_results.py BEFORE.json AFTER.json [--impl ours] [--out FILE.md]"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _tflops(path: Path, impl: str) -> tuple[dict, dict[tuple, float | None]]:
    data = json.loads(path.read_text())
    out: dict[tuple, float | None] = {}
    for case in data["results"]:
        key = (case["variant"], case["config"], case["seq_len"])
        hit = [r for r in case["impls"] if r["impl"] == impl]
        out[key] = hit[0]["tflops"] if hit and hit[0]["status"] == "ok" else None
    return data["meta"], out


def compare(before: Path, after: Path, impl: str = "ours") -> str:
    meta_b, b = _tflops(before, impl)
    meta_a, a = _tflops(after, impl)
    lines = [f"- before: `{before}`: {meta_b['device']}, {meta_b['date']}, commit "
             f"{meta_b['commit']}", f"- after: `{after}`: {meta_a['device']}, {meta_a['date']}, "
             f"commit {meta_a['commit']}", "",
             "| variant | config | S | before | after | change |", "|---|---|---|---|---|---|"]
    for key in sorted(set(b) | set(a), key=lambda k: (k[1], k[2], k[0])):
        x, y = b.get(key), a.get(key)
        change = f"{100 * (y / x - 1):+.1f}%" if x and y else "-"
        cell = lambda v: f"{v:.0f}" if v else "-"  # noqa: E731
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {cell(x)} | {cell(y)} | {change} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--impl", default="ours")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = compare(args.before, args.after, args.impl)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
