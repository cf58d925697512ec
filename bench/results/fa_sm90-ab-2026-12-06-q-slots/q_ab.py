"""A/B of fa_sm90's one-Q-buffer boundary: each consumer's Q rows on a slot of their
own (the source) against one Q slot for both (.ab/fa_sm90_before_qrows.cu), the
library's default-hook builds at D = 256 and QK/V 192/128, causal and full,
interleaved rounds, CUDA events. --compile-only builds them."""
import json, statistics, sys, torch
from cubridge.kernels import get_kernel
from cubridge.build.attention_op import register, call_attention_fwd
fa = get_kernel("fa_sm90")
OLD = open(".ab/fa_sm90_before_qrows.cu").read()
DIMS = {"d256": (256, None, 16, 8), "d192_128": (192, 128, 128, 128)}
def build(src, d, dv, causal):
    return fa.launchable(d, torch.bfloat16, "sm_90a", causal=causal, source=src, head_dim_v=dv)
if "--compile-only" in sys.argv:
    for d, dv, _, _ in DIMS.values():
        for c in (False, True):
            fa.compile(d, torch.bfloat16, "sm_90a", causal=c, head_dim_v=dv, source=OLD)
            fa.compile(d, torch.bfloat16, "sm_90a", causal=c, head_dim_v=dv)
    sys.exit(0)
rows = []
for name, (d, dv, hq, hk) in DIMS.items():
    keys = {(side, c): register(build(None if side == "new" else OLD, d, dv, c))
            for side in ("old", "new") for c in (False, True)}
    for s in (1024, 2048, 4096, 8192):
        b = 16384 // s
        q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hk, s, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hk, s, dv or d, device="cuda", dtype=torch.bfloat16)
        times = {key: [] for key in keys}
        ref = {}
        for _ in range(3):
            for key, kk in keys.items():
                out, _ = call_attention_fwd(q, k, v, [], d ** -0.5, kk)
                ref.setdefault(key[1], out)
                assert torch.equal(out, ref[key[1]]) or \
                    (out.float() - ref[key[1]].float()).abs().max().item() < 2e-2, key
                for _ in range(3):
                    call_attention_fwd(q, k, v, [], d ** -0.5, kk)
                st, en = torch.cuda.Event(True), torch.cuda.Event(True)
                st.record()
                for _ in range(10):
                    call_attention_fwd(q, k, v, [], d ** -0.5, kk)
                en.record(); torch.cuda.synchronize()
                times[key].append(st.elapsed_time(en) / 10)
        for c in (False, True):
            old, new = (statistics.median(times[(side, c)]) for side in ("old", "new"))
            rows.append({"dims": name, "S": s, "causal": c, "old_ms": old, "new_ms": new})
            print(f"{name:9s} S={s} {'causal' if c else 'full  '} old {old:8.3f} ms  new "
                  f"{new:8.3f} ms  {old / new - 1:+.1%}", flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
