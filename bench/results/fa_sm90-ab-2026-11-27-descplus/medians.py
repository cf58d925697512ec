"""Median change per case (desc against head) of each A/B here: python medians.py > medians.txt"""
import statistics

for folder in ("first-ab.md", "s4096/ab.md", "s2048-8192/ab.md"):
    rows = open(folder).read().splitlines()
    print(f"{folder}: desc against head (median of the rounds)")
    changes = []
    for row in rows[2:]:
        c = [x.strip() for x in row.strip("|").split("|")]
        a = statistics.median(float(x) for x in c[3].split("/"))
        b = statistics.median(float(x) for x in c[4].split("/"))
        changes.append(100 * (b / a - 1))
        print(f"  {c[0]:30s} {c[1]:11s} S={c[2]:5s} {a:6.0f} -> {b:6.0f}  {changes[-1]:+5.1f}%")
    print(f"  median of the cases: {statistics.median(changes):+.1f}%")
