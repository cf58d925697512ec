"""Markdown table of an A/B results.json (variant_ab.py): one row per case, one
column per label with its rounds as `r1 / r2 / ...` (TFLOP/s), so that a
README quotes the run's numbers as written, not retyped. With --medians, each
label's median over its rounds instead, and every label after the first with its
change against the first (the baseline).

    python bench/kernels/fa_sm90/ab_table.py RESULTS.json [--configs llama2_7b] [--medians]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _median_cell(runs: list[dict], base: float | None) -> str:
    failed = sorted({i["status"] for i in runs if i["status"] != "ok"})
    if not runs or failed:
        return "/".join(failed) or "-"
    median = statistics.median(i["tflops"] for i in runs)
    return f"{median:.0f}" if base is None else f"{median:.0f} ({median / base - 1:+.1%})"


def table(results: list[dict], configs: set[str] | None = None, medians: bool = False) -> str:
    labels: list[str] = []
    for r in results:
        for i in r["impls"]:
            label = i["impl"].split("#")[0]
            if label not in labels:
                labels.append(label)
    lines = ["| variant | config | S | " + " | ".join(labels) + " |",
             "|---|---|---|" + "---|" * len(labels)]
    for r in results:
        if configs and r["config"] not in configs:
            continue
        cells = []
        by_label = {label: [i for i in r["impls"] if i["impl"].split("#")[0] == label]
                    for label in labels}
        if medians:
            first = by_label[labels[0]]
            base = (statistics.median(i["tflops"] for i in first)
                    if first and all(i["status"] == "ok" for i in first) else None)
            cells = [_median_cell(by_label[labels[0]], None)]
            cells += [_median_cell(by_label[label], base) for label in labels[1:]]
            lines.append(f"| {r['variant']} | {r['config']} | {r['seq_len']} | "
                         + " | ".join(cells) + " |")
            continue
        for label in labels:
            runs = by_label[label]
            cells.append(" / ".join(f"{i['tflops']:.0f}" if i["status"] == "ok" else i["status"]
                                    for i in runs))
        lines.append(f"| {r['variant']} | {r['config']} | {r['seq_len']} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--configs", default="")
    ap.add_argument("--medians", action="store_true",
                    help="each label's median, and its change against the first label")
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    print(table(data["results"], set(filter(None, args.configs.split(","))) or None,
                medians=args.medians))


if __name__ == "__main__":
    main()
