"""Each interleaved round's stag / head pair from the device logs of this record
(stdout of variant_ab.py, the calls cut by their timeouts before results.json).

    python bench/results/fa_sm90-ab-2026-11-28-stagger/pairs.py > .../pairs.md
"""

import re
import sys
from pathlib import Path

LINE = re.compile(r"^(\S+)\s+(\S+)\s+S=(\d+)\s+(head|stag)#(\d+)\s+([\d.]+) TFLOP/s")


def pairs(log: Path):
    seen, section = {}, ""
    for text in log.read_text().splitlines():
        if text.startswith("## "):
            section = text[3:].strip()
        m = LINE.match(text)
        if m:
            variant, config, s, label, rnd, tflops = m.groups()
            seen[(section, variant, config, int(s), int(rnd), label)] = float(tflops)
    for (section, variant, config, s, rnd, label), head in seen.items():
        stag = seen.get((section, variant, config, s, rnd, "stag"))
        if label == "head" and stag is not None:
            yield section, variant, config, s, rnd, head, stag


def main() -> None:
    here = Path(__file__).parent
    print("| log | variant | config | S | round | head | stag | change |")
    print("|---|---|---|---|---|---|---|---|")
    changes = []
    for log in sorted(here.glob("log-*.txt")):
        for section, variant, config, s, rnd, head, stag in pairs(log):
            change = stag / head - 1
            changes.append(change)
            name = log.stem + (f" ({section})" if section else "")
            print(f"| {name} | {variant} | {config} | {s} | {rnd} | {head:.1f} | {stag:.1f} "
                  f"| {change:+.1%} |")
    changes.sort()
    print(f"\n{len(changes)} pairs: change {changes[0]:+.1%} to {changes[-1]:+.1%}, "
          f"median {changes[len(changes) // 2]:+.1%}", file=sys.stdout)


if __name__ == "__main__":
    main()
