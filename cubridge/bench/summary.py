"""Ours against the peers, computed from one benchmark's results (never retyped):

- each variant's TFLOP/s over the best peer that ran it (verified) on the same
  case, and the geometric mean of that ratio over the variants some peer runs,
  per head config and S;
- each variant's TFLOP/s over our own causal kernel's on the same config and
  S (what a mask or a score_mod costs the kernel);
- the variants no peer runs, against an absolute bar.

`Targets` holds the bars (the project's goals, issue 14: 0.9x the best peer,
a geomean of 1.05x, 85% of our causal, 80% for document_causal, 550 TFLOP/s
for the normalisers no peer has). `summary_markdown` renders the three
tables with a verdict per row; `cubridge bench` writes it as summary.md beside
results.md, and `python bench/vs_peers.py RESULTS.json` renders it for merged
results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cubridge.bench.runner import OK, CaseResult

OURS = "ours"
# Not peers a user would pick at these sizes: the spec's own eager reference.
NOT_PEERS = frozenset({"eager", "eager_fp32"})
FULL_AND_CAUSAL = ("full", "causal")


@dataclass(frozen=True)
class Targets:
    vs_best_peer: float = 0.9
    geomean_vs_best_peer: float = 1.05
    vs_causal: float = 0.85
    vs_causal_of: Mapping[str, float] = field(
        default_factory=lambda: {"document_causal": 0.80})
    tflops_of: Mapping[str, float] = field(default_factory=lambda: {
        "relu_causal": 550.0, "sigmoid_causal": 550.0, "comb_prefix_softcap_sigmoid": 550.0})

    def causal_bar(self, variant: str) -> float | None:
        if variant in FULL_AND_CAUSAL:
            return None
        return self.vs_causal_of.get(variant, self.vs_causal)


@dataclass(frozen=True)
class Row:
    """Ours on one case, the best verified peer there, and our causal."""

    variant: str
    config: str
    seq_len: int
    ours: float | None
    best_peer: str | None
    best_peer_tflops: float | None
    causal: float | None  # ours on causal, same config and S

    @property
    def vs_best_peer(self) -> float | None:
        return self.ours / self.best_peer_tflops if self.ours and self.best_peer_tflops else None

    @property
    def vs_causal(self) -> float | None:
        return self.ours / self.causal if self.ours and self.causal else None


def rows(results: Sequence[CaseResult], ours: str = OURS) -> list[Row]:
    ok = {(r.variant, r.config, r.seq_len): {i.impl: i.tflops for i in r.impls
                                              if i.status == OK and i.tflops}
          for r in results}
    out = []
    for (variant, config, s), timed in ok.items():
        peers = {n: t for n, t in timed.items() if n != ours and n not in NOT_PEERS}
        best = max(peers, key=peers.get) if peers else None
        causal = ok.get(("causal", config, s), {}).get(ours)
        out.append(Row(variant, config, s, timed.get(ours), best,
                       peers.get(best) if best else None, causal))
    return out


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _verdict(value: float | None, bar: float | None) -> str:
    if bar is None:
        return ""
    if value is None:
        return "no figure"
    return "met" if value >= bar else "NOT met"


def _num(x: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def summary_markdown(results: Sequence[CaseResult], targets: Targets | None = None,
                     ours: str = OURS) -> str:
    """The three tables of the module docstring, each row with its bar and verdict."""
    t = targets or Targets()
    all_rows = rows(results, ours)
    if not any(r.ours for r in all_rows):
        return f"No verified `{ours}` figure in these results: nothing to compare.\n"
    order = {v: i for i, v in enumerate(dict.fromkeys(r.variant for r in results))}
    all_rows.sort(key=lambda r: (r.config, r.seq_len, order[r.variant]))
    met = total = 0

    def count(verdict: str) -> str:
        nonlocal met, total
        if verdict:
            total += 1
            met += verdict == "met"
        return verdict

    peer_lines = ["## Ours against the best peer", "",
                  "TFLOP/s on allowed pairs; the best peer is the fastest verified peer of "
                  "the same case.", "",
                  "| config | S | variant | ours | best peer | peer TFLOP/s | ratio | bar "
                  "| verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for r in all_rows:
        if r.best_peer is not None:
            bar = t.vs_best_peer
            cells = [r.best_peer, _num(r.best_peer_tflops), _num(r.vs_best_peer, "{:.3f}x"),
                     f"{bar:.2f}x", count(_verdict(r.vs_best_peer, bar))]
        else:
            bar = t.tflops_of.get(r.variant)
            cells = ["no peer runs it", "-", "-",
                     f"{bar:.0f} TFLOP/s" if bar else "-", count(_verdict(r.ours, bar))]
        peer_lines.append(f"| {r.config} | {r.seq_len} | {r.variant} | {_num(r.ours)} | "
                          + " | ".join(cells) + " |")

    geo_lines = ["## Geomean over the variants some peer runs", "",
                 "| config | S | variants | geomean of ours / best peer | bar | verdict |",
                 "|---|---|---|---|---|---|"]
    for config, s in dict.fromkeys((r.config, r.seq_len) for r in all_rows):
        ratios = [r.vs_best_peer for r in all_rows
                  if (r.config, r.seq_len) == (config, s) and r.best_peer is not None]
        figures = [x for x in ratios if x is not None]
        value = geomean(figures) if figures and len(figures) == len(ratios) else None
        note = "" if value is not None or not ratios else " (ours missing on some)"
        geo_lines.append(f"| {config} | {s} | {len(ratios)}{note} | {_num(value, '{:.3f}x')} | "
                         f"{t.geomean_vs_best_peer:.2f}x | "
                         f"{count(_verdict(value, t.geomean_vs_best_peer)) if ratios else ''} |")

    causal_lines = ["## Against our own causal kernel", "",
                    "Each variant's TFLOP/s over ours on causal at the same config and S.", "",
                    "| config | S | variant | ours | ours causal | ratio | bar | verdict |",
                    "|---|---|---|---|---|---|---|---|"]
    uncounted = 0
    for r in all_rows:
        bar = t.causal_bar(r.variant)
        if bar is None:
            continue
        if r.ours is not None and r.causal is None:
            # Causal was not run at this config and S (a corpus, a partial run): the
            # bar cannot be judged, which is not a miss of ours.
            verdict, uncounted = "no causal figure", uncounted + 1
        else:
            verdict = count(_verdict(r.vs_causal, bar))
        causal_lines.append(f"| {r.config} | {r.seq_len} | {r.variant} | {_num(r.ours)} | "
                            f"{_num(r.causal)} | {_num(r.vs_causal, '{:.0%}')} | {bar:.0%} | "
                            f"{verdict} |")
    head = [f"Bars met: {met} of {total}." + (
        f" Not counted: {uncounted} row{'s' * (uncounted != 1)} against our causal whose "
        "config and S have no causal figure of ours in these results." if uncounted else ""), ""]
    return "\n".join([*head, *peer_lines, "", *geo_lines, "", *causal_lines, ""])
