"""Where the common path's epilogue spends its warps' time in ncu's stall sampling
(doc_source.csv.gz: `ncu --page source --csv --print-source sass` of fa_sm90 running
document_causal, S = 4096, llama2_7b heads). The epilogue runs from the wait for the last
PV product (WARPGROUP.DEPBAR.LE gsb0, 0x1) to the TMA store after the O staging stores
that run once per tile and warp.

    python epilogue_stalls.py > epilogue_stalls.md"""
import collections
import csv
import gzip
import io

rows = list(csv.reader(io.TextIOWrapper(gzip.open("doc_source.csv.gz"), "utf-8")))
hdr, data = rows[1], rows[2:]
ix = {h: i for i, h in enumerate(hdr)}


def num(r, k):
    v = r[ix[k]].replace(",", "")
    return float(v) if v else 0.0


def src(i):
    return data[i][ix["Source"]]


total = sum(num(r, "Warp Stall Sampling (All Samples)") for r in data)
runs = collections.Counter(int(num(r, "Instructions Executed")) for i, r in enumerate(data)
                           if "STS" in src(i))
per_tile = max(runs, key=lambda c: (runs[c] == 32, c))  # the 32 stores of the common path
stores = [i for i, r in enumerate(data)
          if "STS" in src(i) and int(num(r, "Instructions Executed")) == per_tile]
lo = stores[0]
while "WARPGROUP.DEPBAR.LE gsb0, 0x1" not in src(lo):
    lo -= 1
hi = stores[-1]
while "UTMASTG" not in src(hi):
    hi += 1
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
by, samples, executed = collections.Counter(), 0.0, 0.0
for r in data[lo:hi + 1]:
    samples += num(r, "Warp Stall Sampling (All Samples)")
    executed += num(r, "Instructions Executed")
    for k in reasons:
        by[k] += num(r, k)
print(f"The common path's epilogue: {executed / per_tile:.0f} instructions per warp and tile, "
      f"{samples / total:.1%} of the kernel's stall samples.\n")
print("| reason | share of the epilogue's samples |\n|---|---|")
for k, v in by.most_common(8):
    print(f"| {k[len('stall_'):]} | {v / samples:.1%} |")
