"""Median change per case of each A/B here (its ab.md, rounds as written by
bench/kernels/fa_sm90/ab_table.py): python medians.py > medians.txt"""
import statistics

AB = [("first/A", "base", "e1"), ("first/B", "base", "e1"), ("first/B", "base", "e3"),
      ("e1b", "base", "e1b"), ("ends", "base", "e1b"), ("elementwise", "base", "head"),
      ("key-run-mask-early", "head", "e3b")]

for folder, before, after in AB:
    rows = open(f"{folder}/ab.md").read().splitlines()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    ia, ib = header.index(before), header.index(after)
    print(f"{folder}: {after} against {before} (median of the rounds)")
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        a = statistics.median(float(x) for x in cells[ia].split("/"))
        b = statistics.median(float(x) for x in cells[ib].split("/"))
        print(f"  {cells[0]:30s} {cells[1]:11s} S={cells[2]:5s} {a:6.0f} -> {b:6.0f}  "
              f"{100 * (b / a - 1):+5.1f}%")
