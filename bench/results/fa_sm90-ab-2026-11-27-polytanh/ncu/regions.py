"""Where a consumer's steady unmasked block spends its warps' stall samples, by phase
(ncu --page source --csv --print-source sass of one launch, S = 4096, llama2_7b heads):
the steady loop's SASS lines are those executed as often as its two most executed
groups (exec counts below, read off each file); phases split at the mma token's
BAR.SYNC, the wait for S (DEPBAR 0x1) and the wait for the PV product (DEPBAR 0x0).

    python regions.py > regions.txt"""
import csv,gzip,io
for name, execs in (("causal",(507904,502842)),("comb_prefix_softcap_sigmoid",(536576,534464))):
    rows=list(csv.reader(io.TextIOWrapper(gzip.open(f"{name}-source.csv.gz"),"utf-8")))
    hdr=rows[1]; data=rows[2:]; ix={h:i for i,h in enumerate(hdr)}
    def n(r,k):
        v=r[ix[k]].replace(",","");return float(v) if v else 0
    idx=[i for i,r in enumerate(data) if int(n(r,"Instructions Executed")) in execs]
    src=lambda i: data[i][ix["Source"]]
    # region markers: first BAR.SYNC (token take), last HGMMA before DEPBAR, first DEPBAR gsb0 0x1, next DEPBAR 0x0
    regions=[]; cur="pre (K wait, classify, mask)"; acc={}
    order=[]
    for i in idx:
        s=src(i)
        if "BAR.SYNC" in s and cur.startswith("pre"): cur="token wait + issue"
        if "DEPBAR.LE gsb0, 0x1" in s: cur="S wait"
        elif cur=="S wait": cur="softmax"
        if "DEPBAR.LE gsb0, 0x0" in s: cur="PV wait"
        elif cur=="PV wait": cur="after PV (fragments, loop)"
        if cur not in acc: order.append(cur); acc[cur]=[0,0]
        acc[cur][0]+=n(data[i],"Warp Stall Sampling (All Samples)"); acc[cur][1]+=1
    tot=sum(v[0] for v in acc.values())
    print(name, int(tot), "samples; per warp-block", round(tot/execs[0],4))
    for k in order: print(f"   {k:32s} {int(acc[k][0]):6d} {100*acc[k][0]/tot:5.1f}%  ({acc[k][1]} instrs)")
