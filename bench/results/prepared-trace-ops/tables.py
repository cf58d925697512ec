"""Prints the CPU table of README.md from the `cubridge run` logs in cpu-runs/ (no number
typed by hand): python bench/results/prepared-trace-ops/tables.py"""
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

print("| spec | IR verification (CPU executor) | mask bits by | nvcc sm_90a |")
print("|---|---|---|---|")
for log in sorted((HERE / "cpu-runs").glob("*.log")):
    text = log.read_text()
    ir = re.search(r"\[verify-ir\].*?(PASS|FAIL)[^:]*: .*? (\d+/\d+) cases", text)
    ir_cell = f"{ir.group(1)} {ir.group(2)}" if ir else "-"
    form = re.search(r"mask bits by (.*?)\) \(\d", text)
    spills = re.findall(r"(\d+) B of spill traffic \((\w+) the (\d+) B budget", text)
    built = "[compile] nvcc" in text
    cell = ("no spills" if not spills else
            f"{spills[0][0]} B of spills ({spills[0][1].lower()} the {spills[0][2]} B budget)"
            ) if built else "-"
    print(f"| {log.stem} | {ir_cell} | {form.group(1) if form else '-'} | {cell} |")
