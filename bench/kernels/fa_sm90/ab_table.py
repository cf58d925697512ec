"""Markdown table of an A/B results.json (variant_ab.py): one row per case, one
column per label with its rounds as `r1 / r2 / ...` (TFLOP/s), so that a
README quotes the run's numbers as written, not retyped.

    python bench/kernels/fa_sm90/ab_table.py RESULTS.json [--configs llama2_7b]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def table(results: list[dict], configs: set[str] | None = None) -> str:
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
        for label in labels:
            runs = [i for i in r["impls"] if i["impl"].split("#")[0] == label]
            cells.append(" / ".join(f"{i['tflops']:.0f}" if i["status"] == "ok" else i["status"]
                                    for i in runs))
        lines.append(f"| {r['variant']} | {r['config']} | {r['seq_len']} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--configs", default="")
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    print(table(data["results"], set(filter(None, args.configs.split(","))) or None))


if __name__ == "__main__":
    main()
