"""Print the A/B table of this folder's perf.json (TFLOP/s on allowed pairs, and
the fraction of the same run's generated causal kernel from fa_sm80.cu)."""
import json
import sys
from pathlib import Path

run = json.loads((Path(__file__).resolve().parents[1] / "perf.json").read_text())
rows = [g for g in run["generated_hooks"] if "tflops" in g]
sources = list(dict.fromkeys(g["source"] for g in rows))
variants = list(dict.fromkeys(g["variant"] for g in rows))
tflops = {(g["variant"], g["source"]): g["tflops"] for g in rows}
causal = tflops[("causal", "fa_sm80.cu")]
out = [f"{run['device']}, {run['date']}, commit {run['commit']}: `{run['command']}`", "",
       "TFLOP/s on allowed pairs (in brackets: fraction of this run's causal through "
       f"fa_sm80.cu, {causal:.0f}):", "",
       "| variant | " + " | ".join(sources) + " |", "|---|" + "---|" * len(sources)]
for v in variants:
    cells = [f"{tflops[(v, s)]:.0f} ({tflops[(v, s)] / causal:.0%})" if (v, s) in tflops
             else "-" for s in sources]
    out.append(f"| {v} | " + " | ".join(cells) + " |")
sys.stdout.write("\n".join(out) + "\n")
