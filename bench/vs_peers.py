"""Ours against the best peer (each variant and the geomean) and against our own
causal kernel, with the bars of cubridge.bench.summary.Targets, computed from
one `cubridge bench` results.json (a merged one included) into markdown:

    python bench/vs_peers.py bench/results/NAME/results.json > bench/results/NAME/summary.md

`cubridge bench` writes the same summary.md itself; this renders it again for
results merged from several runs (`cubridge bench --merge`) or older results.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cubridge.bench.report import load_json, render_summary


def main(paths: list[str]) -> int:
    if len(paths) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    meta, results = load_json(Path(paths[0]))
    print(render_summary(meta, results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
