"""Markdown table of an A/B results.json (variant_ab.py): one row per case, one
column per label with its rounds as `r1 / r2 / ...` (TFLOP/s), so that a
README quotes the run's numbers as written, not retyped. With --medians, each
label's median over its rounds instead, every label after the first with its
change against the first (the baseline), and below the table each label's changes
summed up over the cases (their median, lowest and highest).

    python bench/kernels/fa_sm90/ab_table.py RESULTS.json [--configs llama2_7b] [--medians]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _median(runs: list[dict]) -> float | None:
    """The rounds' median TFLOP/s; None unless every round verified."""
    if not runs or any(i["status"] != "ok" for i in runs):
        return None
    return statistics.median(i["tflops"] for i in runs)


def _median_cell(runs: list[dict], base: float | None) -> str:
    median = _median(runs)
    if median is None:  # (the failed rounds' statuses, not a number)
        return "/".join(sorted({i["status"] for i in runs if i["status"] != "ok"})) or "-"
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
        by_label = {label: [i for i in r["impls"] if i["impl"].split("#")[0] == label]
                    for label in labels}
        if medians:
            base = _median(by_label[labels[0]])  # (the first label is the baseline)
            cells = [_median_cell(by_label[labels[0]], None)]
            cells += [_median_cell(by_label[label], base) for label in labels[1:]]
        else:
            cells = [" / ".join(f"{i['tflops']:.0f}" if i["status"] == "ok" else i["status"]
                                for i in by_label[label]) for label in labels]
        lines.append(f"| {r['variant']} | {r['config']} | {r['seq_len']} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


def change_summary(results: list[dict], configs: set[str] | None = None) -> str:
    """Per label after the first: the median, lowest and highest of its cases'
    changes against the first label (cases where either side failed left out)."""
    changes: dict[str, list[float]] = {}
    for r in results:
        if configs and r["config"] not in configs:
            continue
        by_label: dict[str, list[dict]] = {}
        for i in r["impls"]:
            by_label.setdefault(i["impl"].split("#")[0], []).append(i)
        labels = list(by_label)
        base = _median(by_label[labels[0]])
        for label in labels[1:]:
            median = _median(by_label[label])
            if base is not None and median is not None:
                changes.setdefault(label, []).append(median / base - 1)
    return "; ".join(f"{label}: median {statistics.median(c):+.1%}, {min(c):+.1%} to "
                     f"{max(c):+.1%} over {len(c)} cases" for label, c in changes.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--configs", default="")
    ap.add_argument("--medians", action="store_true",
                    help="each label's median, and its change against the first label")
    args = ap.parse_args()
    data = json.loads(args.results.read_text())
    configs = set(filter(None, args.configs.split(","))) or None
    print(table(data["results"], configs, medians=args.medians))
    if args.medians:
        print(f"\n{change_summary(data['results'], configs)}")


if __name__ == "__main__":
    main()
